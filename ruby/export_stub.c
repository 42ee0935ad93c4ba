/* export_stub.c — used only while ruby/export.c does not exist. Context: GVL held. */
#include "rperf_ruby.h"
void rperf_rb_exporters_init(VALUE mRperf) { (void)mRperf; }
