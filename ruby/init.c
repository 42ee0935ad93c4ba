/*
 * init.c — Init_rperf, the extension's entry point: declares the extension
 * Ractor-safe, creates the one internal thread-specific key, preregisters the
 * sampling job, initialises the engine and defines the Ruby API.
 * Context: GVL held, main Ractor, at require time.
 */
#include "rperf_ruby.h"

VALUE rperf_rb_mRperf;

RUBY_FUNC_EXPORTED void Init_rperf(void);
RUBY_FUNC_EXPORTED void Init_rperf(void)
{
    rb_ext_ractor_safe(true);
    rperf_rb_mRperf = rb_define_module("Rperf");
    rperf_rb_ruby_version_init(rperf_rb_mRperf);
    if (rperf_rb_capture_init() < 0)
        rb_raise(rb_eLoadError, "rperf: no free postponed-job slot");
    if (rperf_engine_init(&rperf_rb_host) < 0)
        rb_raise(rb_eLoadError, "rperf: engine initialisation failed");
    rperf_rb_ractor_init();
    rperf_rb_labels_init(rperf_rb_mRperf);
    rperf_rb_profile_init(rperf_rb_mRperf);
    rperf_rb_child_windows_init(rperf_rb_mRperf);
    rperf_rb_window_send_init(rperf_rb_mRperf);
    rperf_rb_serve_accept_init(rperf_rb_mRperf);
    rperf_rb_window_delta_init(rperf_rb_mRperf);
    rperf_rb_api_init(rperf_rb_mRperf);
    rperf_rb_exec_init();
    rperf_rb_signals_init(rperf_rb_mRperf);
    rperf_rb_exporters_init(rperf_rb_mRperf);
    rperf_rb_decode_init(rperf_rb_mRperf);
    rperf_rb_stat_init(rperf_rb_mRperf);
    rperf_rb_merge_init(rperf_rb_mRperf);
    rperf_rb_normalize_init(rperf_rb_mRperf);
    rperf_rb_request_label_init(rperf_rb_mRperf);
}
