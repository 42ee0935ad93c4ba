# frozen_string_literal: true

# tests/ruby/test_interop_collapsed.rb — every collapsed line matches the
# strict folded-stack grammar of the validators reference §2.1, checked with
# grep -E (both the basic and the stricter variant), on hostile frame names
# (';', newlines, edge spaces, empty labels, invalid UTF-8), GVL/GC frames,
# empty and deep profiles, allocation profiles of each sample type, and
# real profiles when the engine is available.
# speedscope's importer reads the same files in test_interop_speedscope.rb.
# Label: interop.

require "test/unit"
require "tmpdir"
require "rperf"
require_relative "../interop/helper"

H = InteropHelper
H.require_readers!([["grep", !H.which("grep").nil?]])

class TestInteropCollapsed < Test::Unit::TestCase
  BASIC = '^[^;]+(;[^;]+)* [0-9]+$'
  F = '[^;[:space:]]([^;]*[^;[:space:]])?'
  STRICT = "^#{F}(;#{F})* [1-9][0-9]*$"

  def setup
    @dir = Dir.mktmpdir("rperf-folded")
  end

  def teardown
    FileUtils.rm_rf(@dir)
  end

  # grep -v prints the bad lines; exit 1 = none.
  def assert_grammar(path)
    [BASIC, STRICT].each do |re|
      out, err, st = H.run_cmd("grep", "-nvE", re, path, env: { "LC_ALL" => "C" })
      assert_equal(1, st.exitstatus, "#{File.basename(path)} has lines outside #{re}:\n#{out}#{err}")
    end
  end

  def save(name, data)
    path = File.join(@dir, name)
    Rperf.save(path, data)
    path
  end

  def test_rich_profiles
    %i[cpu wall].each do |mode|
      path = save("rich-#{mode}.collapsed", H.rich_profile(mode))
      assert_grammar(path)
      text = File.read(path, encoding: "UTF-8")
      assert(text.valid_encoding?)
      assert_include(text, "Object#main;Foo#bar;[GC marking] 3000000\n")
      assert_include(text, "Object#main;(unknown);bad\uFFFD\\x3bna me\\x0ax 1000\n")
      assert_include(text, "Object#main;block (2 levels) in <main>;Kernel#sleep;[GVL blocked] 50000000\n") if mode == :wall
      # stacks from two threads merged: 20 ms (thread 1) + 7 ms (thread 2)
      assert_include(text, "Object#main;Foo#bar 27000000\n")
    end
  end

  def test_hostile_names
    names = [" lead", "trail ", "semi;colon", "new\nline", "tab\there", "", "\xFF\xFE".b, "ok", "a\rb", "\u00e9t\u00e9"]
    samples = names.each_with_index.map { |n, i| [[["x.rb", n], ["x.rb", "root"]], i + 1, 1, 0] }
    path = save("hostile.folded", { aggregated_samples: samples })
    assert_grammar(path)
    assert_equal(names.size, File.readlines(path).size)
  end

  def test_empty_and_deep
    path = save("empty.collapsed", H.empty_profile)
    assert_equal("", File.read(path))
    path = save("deep.collapsed", H.deep_profile(1500))
    assert_grammar(path)
    assert_equal([1500, 800], File.readlines(path).map { |l| l.split(" ").first.count(";") + 1 }.sort.reverse)
  end

  def test_allocation_profiles
    data = H.alloc_profile
    H::ALLOC_TYPES.each do |t|
      path = File.join(@dir, "alloc-#{t}.collapsed")
      Rperf.save(path, data, sample_type: t)
      assert_grammar(path)
      lines = File.readlines(path, chomp: true)
      assert_equal(H.alloc_totals(data)[t], lines.sum { |l| l.rpartition(" ").last.to_i }, t)
    end
    path = File.join(@dir, "alloc-cpu.collapsed")
    Rperf.save(path, H.alloc_profile(:cpu), sample_type: :alloc_space)
    assert_grammar(path)
  end

  def test_real_profiles
    profiles = H.real_profiles
    omit("engine not available yet (Rperf.start/stop): real-profile interop not run") unless profiles
    profiles.each { |mode, data| assert_grammar(save("real-#{mode}.collapsed", data)) }
    # written at stop, from the engine's data
    H.real_outputs(@dir, ".collapsed", :collapsed).each { |path| assert_grammar(path) }
  end
end
