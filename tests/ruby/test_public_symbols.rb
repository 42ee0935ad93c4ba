# frozen_string_literal: true

# tests/ruby/test_public_symbols.rb — rperf.so calls Ruby only through its
# public C API (CTest labels `ruby` and `symbols`, no M:N rerun: it reads
# the built library, it runs nothing). Every `rb_*`/`ruby_*` symbol the
# library imports must be declared by the headers the Ruby it is built for
# installs (include/ruby-X.Y.Z), or be one of ALLOWED: functions libruby
# exports and Ruby's own bundled ext/objspace calls in every version from
# 3.3 on, but that no installed header declares. A function a Ruby keeps
# private can vanish in its next release (as two GC internals did in 3.4),
# and then the extension no longer links.
#
# "Declared" is decided by the C compiler the Ruby was built with: a file
# that includes every public header and takes the address of each imported
# symbol; an undeclared one is a compile error naming it, unless a public
# header's inline code calls it (declared inside that function's body).

require_relative "helper"
require "open3"
require "rbconfig"
require "tmpdir"

class TestPublicSymbols < Test::Unit::TestCase
  # name => why it is allowed (each also explained where it is declared,
  # ruby/alloc.c)
  ALLOWED = {
    "rb_gc_obj_slot_size" =>
      "a new object's slot size, read in the NEWOBJ hook before the object's body exists; " \
      "ext/objspace calls it (objspace_dump.c); no public function gives it",
    "rb_obj_memsize_of" =>
      "the C side of ObjectSpace.memsize_of (ext/objspace); the method needs require \"objspace\" " \
      "and a method call, neither allowed while a window closes",
    "rb_objspace_each_objects" =>
      "the heap's pages, to check a tracked object's address before its slot is read at a close; " \
      "ext/objspace calls it",
  }.freeze

  # Headers that are not standalone C (C++, other platforms, or meant to be
  # included only by another header).
  SKIP_HEADERS = %r{\A(ruby/(win32|backward/.*|internal/.*|.*\.hpp|io/buffer)|ruby/oniguruma)\.h\z|\.hpp\z}

  def build_dir = ENV.fetch("RPERF_BUILD_DIR", File.expand_path("../../build", __dir__))
  def library = File.join(build_dir, "lib", "rperf.so")

  # The rb_/ruby_ symbols rperf.so imports.
  def imported
    out, err, st = Open3.capture3("nm", "-D", "--undefined-only", library)
    assert(st.success?, "nm failed: #{err}")
    out.lines.filter_map { |l| l.split.last }.map { |s| s.sub(/@.*/, "") }
       .grep(/\A(rb|ruby)_/).uniq.sort
  end

  def hdrdirs
    [RbConfig::CONFIG["rubyhdrdir"], RbConfig::CONFIG["rubyarchhdrdir"]].compact.uniq
  end

  # The public headers of this Ruby that compile on their own.
  def public_headers
    @public_headers ||= begin
      root = RbConfig::CONFIG["rubyhdrdir"]
      names = Dir.glob("ruby/**/*.h", base: root).reject { |h| h.match?(SKIP_HEADERS) }.sort
      Dir.mktmpdir("rperf-hdr") do |dir|
        names.select { |h| compile(dir, "#include <ruby.h>\n#include <#{h}>\n").last.success? }
      end
    end
  end

  def compile(dir, text)
    src = File.join(dir, "probe.c")
    File.write(src, text)
    cc = RbConfig::CONFIG["CC"].split
    incs = hdrdirs.flat_map { |d| ["-I", d] }
    out, st = Open3.capture2e(*cc, "-std=gnu11", "-fsyntax-only", "-fmax-errors=0", *incs, src)
    [out, st]
  end

  # A public header's inline function may declare what it calls inside its
  # own body (ruby/ractor.h: rb_ractor_shareable_p_continue), out of the
  # probe's sight: a call in a public header's code is public too.
  def called_by_public_inline_code?(sym)
    root = RbConfig::CONFIG["rubyhdrdir"]
    @header_code ||= Dir.glob("ruby/**/*.h", base: root).map do |h|
      File.read(File.join(root, h)).gsub(%r{/\*.*?\*/}m, "").gsub(%r{//[^\n]*}, "")
    end
    @header_code.any? { |code| code.match?(/\b#{Regexp.escape(sym)}\s*\(/) }
  end

  # Of `symbols`, those no public header declares.
  def undeclared(symbols)
    Dir.mktmpdir("rperf-sym") do |dir|
      body = symbols.map { |s| "    (void)&#{s};\n" }.join
      text = "#include <ruby.h>\n" + public_headers.map { |h| "#include <#{h}>\n" }.join +
             "void rperf_probe(void);\nvoid rperf_probe(void)\n{\n#{body}}\n"
      out, st = compile(dir, text)
      return [] if st.success?
      missing = out.scan(/[‘'`]((?:rb|ruby)_\w+)[’'] undeclared/).flatten.uniq.sort
      assert(!missing.empty?, "the probe failed for another reason:\n#{out}")
      missing.reject { |sym| called_by_public_inline_code?(sym) }
    end
  end

  def test_every_imported_ruby_symbol_is_public_or_allowed
    syms = imported
    assert_operator(syms.size, :>, 50, "nm found too few Ruby symbols in #{library}")
    bad = undeclared(syms) - ALLOWED.keys
    assert_equal([], bad,
                 "rperf.so calls Ruby functions no public header of Ruby #{RUBY_VERSION} declares " \
                 "(use a public API, or add one to ALLOWED with its reason)")
  end

  # The probe tells a public function from an exported private one: the
  # two GC internals Ruby 3.3 exported and 3.4 does not are reported, a
  # public function and a public variable are not.
  def test_the_probe_reports_private_functions
    got = undeclared(%w[rb_objspace_markable_object_p rb_objspace_marked_object_p rb_gc_count
                        rb_cObject rb_postponed_job_trigger])
    assert_equal(%w[rb_objspace_markable_object_p rb_objspace_marked_object_p], got)
  end

  # Every allowed symbol is still needed: one rperf.so stops importing
  # leaves the list.
  def test_every_allowed_symbol_is_used
    assert_equal([], ALLOWED.keys - imported, "no longer imported: remove from ALLOWED")
  end
end
