# frozen_string_literal: true

# tests/ruby/test_interop_speedscope.rb — speedscope JSON validated against
# the schema shipped in npm's speedscope package (ajv, and Debian's
# python3-jsonschema when present), then pprof, collapsed and JSON files
# imported by speedscope's own importer in headless Chromium driven by
# puppeteer-core (validators reference §3–§4), allocation profiles of each
# sample type among them (unit "bytes" or "none"). The schema alone misses
# index and length errors; the importer catches them. Label: interop.

require "test/unit"
require "tmpdir"
require "json"
require "rperf"
require_relative "../interop/helper"

H = InteropHelper
H.require_readers!([
  ["node", !H.node.nil?],
  ["npm speedscope (#{H::SPEEDSCOPE_SCHEMA})", File.file?(H::SPEEDSCOPE_SCHEMA)],
  ["npm ajv-cli", File.file?(File.join(H::NODE_MODULES, "ajv-cli", "package.json"))],
  ["npm puppeteer-core", File.file?(File.join(H::NODE_MODULES, "puppeteer-core", "package.json"))],
  ["chromium (#{H::CHROMIUM})", File.executable?(H::CHROMIUM)],
])

class TestInteropSpeedscope < Test::Unit::TestCase
  NODE_ENV = { "NODE_PATH" => H::NODE_MODULES }.freeze

  def setup
    @dir = Dir.mktmpdir("rperf-speedscope")
  end

  def teardown
    FileUtils.rm_rf(@dir)
  end

  def profiles
    list = {
      "rich-cpu" => H.rich_profile(:cpu), "rich-wall" => H.rich_profile(:wall),
      "empty" => H.empty_profile, "deep" => H.deep_profile(1500), "many" => H.many_profile(300),
    }
    (H.real_profiles || {}).each { |mode, data| list["real-#{mode}"] = data }
    list
  end

  # Allocation profiles: name => [data, sample_type] (`types`: which).
  def alloc_profiles(types = H::ALLOC_TYPES)
    types.to_h { |t| ["alloc-#{t}", [H.alloc_profile, t]] }
      .merge("alloc-empty" => [{ mode: :alloc, aggregated_samples: [] }, nil]) # default: inuse_space
  end

  # Every fixture saved from its Hash, plus real profiles written at stop
  # (encoded from the engine's data), plus allocation profiles.
  def write_all(suffix, exporter, alloc_types: H::ALLOC_TYPES)
    profiles.map do |name, data|
      path = File.join(@dir, "#{name}#{suffix}")
      Rperf.save(path, data, exporter: exporter)
      path
    end + (H.real_outputs(@dir, suffix, exporter) || []) +
      alloc_profiles(alloc_types).map do |name, (data, type)|
        path = File.join(@dir, "#{name}#{suffix}")
        Rperf.save(path, data, exporter: exporter, sample_type: type)
        path
      end
  end

  def test_schema_ajv
    files = write_all(".speedscope.json", :json)
    ajv = File.join(H::NODE_MODULES, "ajv-cli", "dist", "index.js")
    args = files.flat_map { |f| ["-d", f] }
    out, err, st = H.run_cmd("node", ajv, "validate", "-s", H::SPEEDSCOPE_SCHEMA, *args, env: NODE_ENV)
    assert(st.success?, "ajv: #{out}#{err}")
    assert_equal(files.size, (out + err).scan(/ valid$/).size, out + err)
  end

  def test_schema_python_jsonschema
    py = "/usr/bin/python3"
    _, _, st = H.run_cmd(py, "-c", "import jsonschema")
    omit("Debian python3-jsonschema not installed (second schema validator)") unless st.success?
    write_all(".speedscope.json", :json).each do |f|
      out, err, st2 = H.run_cmd(py, "-m", "jsonschema", "-i", f, H::SPEEDSCOPE_SCHEMA)
      assert(st2.success?, "jsonschema #{File.basename(f)}: #{out}#{err}")
    end
  end

  def test_json_semantics
    write_all(".speedscope.json", :json).each do |f|
      doc = ::JSON.parse(File.read(f, encoding: "UTF-8"))
      if (type = f[/alloc-(\w+?)\.speedscope/, 1])
        type = "inuse_space" if type == "empty"
        unit = type.end_with?("_space") ? "bytes" : "none"
        assert_equal([unit], doc["profiles"].map { |pr| pr["unit"] }.uniq, f)
        assert_equal("rperf #{type} profile", doc["name"], f)
      end
      n = doc["shared"]["frames"].size
      doc["profiles"].each do |pr|
        assert_equal(pr["samples"].size, pr["weights"].size, f)
        assert(pr["samples"].flatten.all? { |i| i.between?(0, n - 1) }, f)
      end
    end
  end

  def test_importer
    # two allocation types (a count and bytes) through each importer
    some = %i[alloc_objects inuse_space]
    files = write_all(".speedscope.json", :json, alloc_types: some) + write_all(".pb.gz", :pprof, alloc_types: some) +
            write_all(".collapsed", :collapsed, alloc_types: some).reject { |f| File.zero?(f) } # empty folded = nothing to import
    check = H::SPEEDSCOPE_CHECK
    out, err, st = H.run_cmd("node", check, *files, env: NODE_ENV)
    results = out.lines.map { |l| ::JSON.parse(l) }
    assert_equal(files.size, results.size, "speedscope-check: #{out}#{err[-2000..]}")
    results.each do |r|
      assert_equal([], r["problems"], "speedscope import of #{r['file']}")
      want = case r["file"]
             when /\.json\z/ then /speedscope/i
             when /\.pb\.gz\z/ then /pprof/i
             else /collapsed/i
             end
      assert(r["importer"].any? { |m| m =~ want }, "#{r['file']} imported as #{r['importer'].inspect}")
    end
    assert(st.success?, err[-2000..])
  end
end
