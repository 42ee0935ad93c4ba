# frozen_string_literal: true

# tests/ruby/test_middleware.rb — Rperf::Middleware (ruby/lib/rperf/middleware.rb):
# the endpoint label normalises ids in paths (one label set per route, not
# per URL), label: :raw keeps the path, a callable chooses its own value,
# bad options are ArgumentErrors naming them, labels are restored after
# each request, and it works inside Ractor workers (shared or not).

require_relative "helper"
require "rperf/middleware"

class TestMiddleware < Test::Unit::TestCase
  include RperfTestHelper

  UUID = "550e8400-e29b-41d4-a716-446655440000"

  def env(path, method = "GET")
    { "REQUEST_METHOD" => method, "PATH_INFO" => path }
  end

  # The app records the labels it sees and burns a little CPU so that the
  # request has samples.
  def app(seen)
    lambda do |e|
      seen << Rperf.labels
      cpu_spin(0.002)
      [200, {}, [e["PATH_INFO"]]]
    end
  end

  def test_normalize_rules
    {
      "/users/123" => "/users/:id",
      "/users/123/posts/45" => "/users/:id/posts/:id",
      "/users/123/" => "/users/:id/",
      "/users/7.json" => "/users/:id.json",
      "/orders/#{UUID}" => "/orders/:uuid",
      "/orders/#{UUID.upcase}/items" => "/orders/:uuid/items",
      "/blobs/da39a3ee5e6b4b0d3255bfef95601890afd80709" => "/blobs/:hex",
      "/objects/507F1F77BCF86CD799439011" => "/objects/:hex",
      # unchanged: not a whole id segment, too short, no digit, dates, slugs
      "/v2/users" => "/v2/users",
      "/x/12ab" => "/x/12ab",
      "/c/deadbeefcafebabe" => "/c/deadbeefcafebabe",
      "/d/2024-06-01" => "/d/2024-06-01",
      "/posts/hello-world" => "/posts/hello-world",
      "/" => "/",
      "" => "",
    }.each do |path, want|
      assert_equal(want, Rperf::Middleware.normalize(path), path.inspect)
    end
  end

  # The Ruby implementation the C scan (ruby/normalize.c) replaced, kept
  # here as the oracle: Middleware.normalize must give the same String (and
  # encoding, and the argument itself when it has no digit and no "-").
  ORACLE_SEGMENT = %r{
    (?<=/)
    (?:
      (?<uuid>\h{8}-\h{4}-\h{4}-\h{4}-\h{12})
    | (?<id>\d+)
    | (?<hex>(?=\h*\d)\h{16,})
    )
    (?=[/.]|\z)
  }x

  def oracle_normalize(path)
    path = path.to_s
    return path unless path.match?(/\d|-/)

    path.gsub(ORACLE_SEGMENT) do
      m = Regexp.last_match
      m[:uuid] ? ":uuid" : m[:id] ? ":id" : ":hex"
    end
  end

  # One generated segment: ids of every kind, near-misses, non-ASCII.
  def random_segment(rng)
    hex = ->(n, up = false) { s = Array.new(n) { "0123456789abcdef"[rng.rand(16)] }.join; up ? s.upcase : s }
    uuid = -> { [8, 4, 4, 4, 12].map { |n| hex.call(n, rng.rand(3).zero?) }.join("-") }
    case rng.rand(18)
    when 0 then ""
    when 1 then rng.rand(10**rng.rand(1..20)).to_s
    when 2 then uuid.call
    when 3 then uuid.call.sub(/.\z/, "")                       # 35 characters
    when 4 then "#{uuid.call}#{hex.call(1)}"                     # 37
    when 5 then hex.call(rng.rand(12..40), rng.rand(2).zero?)
    when 6 then "abcdef" * rng.rand(1..5)                        # hex without a digit
    when 7 then "#{rng.rand(1000)}.json"
    when 8 then "#{hex.call(rng.rand(14..18))}.#{%w[json xml tar.gz 1].sample(random: rng)}"
    when 9 then %w[users v2 api posts x-1 2024-06-01 hello-world].sample(random: rng)
    when 10 then %w[é 日本 ü1 १२३ ０１２ ٣].sample(random: rng)  # non-ASCII (and non-ASCII digits)
    when 11 then "#{rng.rand(100)}-#{rng.rand(100)}"
    when 12 then Array.new(rng.rand(1..4)) { %w[1 a - . / g 0 F].sample(random: rng) }.join
    when 13 then "9" * rng.rand(200..3000)                      # very long
    when 14 then hex.call(rng.rand(1000..4000))
    when 15 then "x" * rng.rand(1000..3000)
    when 16 then ".#{rng.rand(10)}"
    else "#{uuid.call}.json"
    end
  end

  def random_path(rng)
    segs = Array.new(rng.rand(0..7)) { random_segment(rng) }
    path = (rng.rand(8).zero? ? "" : "/") + segs.join("/")
    path << "/" if rng.rand(4).zero?
    path
  end

  def assert_same_normalize(path)
    want = oracle_normalize(path)
    got = Rperf::Middleware.normalize(path)
    assert_equal([want, want.encoding, want.frozen?, want.equal?(path)],
                 [got, got.encoding, got.frozen?, got.equal?(path)], path.inspect)
  end

  def test_normalize_matches_regexp_oracle
    seed = Random.new_seed
    rng = Random.new(seed)
    3000.times do
      path = random_path(rng)
      assert_same_normalize(path)
      assert_same_normalize(path.b)
      assert_same_normalize(path.dup.force_encoding("US-ASCII")) if path.ascii_only?
    end
  rescue Test::Unit::AssertionFailedError => e
    raise e.class, "#{e.message}\n(seed #{seed})"
  end

  def test_normalize_encodings
    [
      "/users/12/x", "/a/b", "/u/#{UUID}.json", "/i/#{'ab12' * 5}", "/é/1", "/ア/12-3",
    ].each do |base|
      %w[UTF-8 ASCII-8BIT ISO-8859-1 Windows-1252 Shift_JIS EUC-JP GB18030].each do |name|
        path = begin
          base.encode(name)
        rescue EncodingError
          next
        end
        assert_same_normalize(path)
        assert_same_normalize(path.freeze)
      end
    end
    # invalid strings and encodings the regexp refuses are normalised as
    # bytes: a request with a malformed path is never failed by the label
    ["/\xff/1".dup.force_encoding("UTF-8"), "/\xff/a".dup.force_encoding("UTF-8"),
     "/x/\xff".dup.force_encoding("US-ASCII"), "/x/1".encode("UTF-16LE"), "/x/1".dup.force_encoding("UTF-7")].each do |bad|
      got = Rperf::Middleware.normalize(bad)
      assert_equal(oracle_normalize(bad.b), got, bad.inspect)
      assert_equal(Encoding::BINARY, got.encoding, bad.inspect)
    end
    assert_equal("/\xff/:id".b, Rperf::Middleware.normalize("/\xff/1".dup.force_encoding("UTF-8")))
    # not a String: its to_s
    assert_equal("", Rperf::Middleware.normalize(nil))
    assert_equal("/a/:id", Rperf::Middleware.normalize(:"/a/1"))
    sub = Class.new(String)
    assert_equal([String, "/a/:id"], [Rperf::Middleware.normalize(sub.new("/a/1")).class, Rperf::Middleware.normalize(sub.new("/a/1"))])
  end

  def test_malformed_path_is_served_and_labelled
    seen = []
    mw = Rperf::Middleware.new(app(seen))
    bad = "/users/\xff/12".dup.force_encoding("UTF-8")
    Dir.mktmpdir("rperf-mw") do |dir|
      out = File.join(dir, "p.json")
      data = Rperf.start(frequency: 1000, output: out) do
        assert_equal([200, {}, [bad]], mw.call(env(bad)), "the request is served")
      end
      assert_equal([{ endpoint: "GET /users/\xff/:id".b }], seen)
      assert_include(data[:label_sets], { endpoint: "GET /users/\xff/:id".b })
      assert_nothing_raised("the profile with that label is written") { JSON.parse(File.read(out)) }
    end
  end

  def test_default_label_normalises_ids
    seen = []
    mw = Rperf::Middleware.new(app(seen))
    data = Rperf.start(frequency: 1000) do
      200.times { |i| assert_equal([200, {}, ["/users/#{i}"]], mw.call(env("/users/#{i}"))) }
      mw.call(env("/orders/#{UUID}", "POST"))
    end
    assert_equal([{ endpoint: "GET /users/:id" }] * 200 + [{ endpoint: "POST /orders/:uuid" }], seen)
    endpoints = data[:label_sets].map { |s| s[:endpoint] }.compact.uniq.sort
    assert_equal(["GET /users/:id", "POST /orders/:uuid"], endpoints,
                 "200 distinct URLs of one route make one label set")
    labelled = data[:aggregated_samples].select { |s| data[:label_sets][s[3]][:endpoint] == "GET /users/:id" }
    assert_not_empty(labelled, rperf_describe(data))
  end

  def test_raw_label_keeps_path
    seen = []
    mw = Rperf::Middleware.new(app(seen), label: :raw)
    Rperf.start(frequency: 1000) { %w[/users/1 /users/2].each { |p| mw.call(env(p)) } }
    assert_equal([{ endpoint: "GET /users/1" }, { endpoint: "GET /users/2" }], seen)
  end

  def test_callable_label_and_label_key
    seen = []
    route = ->(e) { e["rperf.route"] }
    mw = Rperf::Middleware.new(app(seen), label: route, label_key: :route)
    Rperf.start(frequency: 1000) do
      mw.call(env("/users/1").merge("rperf.route" => "users#show"))
      # nil: the request carries no such label (an outer one is removed)
      Rperf.label(route: "outer") { mw.call(env("/health")) }
    end
    assert_equal([{ route: "users#show" }, {}], seen)

    callable = Module.new
    def callable.call(env) = "#{env['REQUEST_METHOD']} custom"
    seen.clear
    mw = Rperf::Middleware.new(app(seen), label: callable)
    Rperf.start(frequency: 1000) { mw.call(env("/x")) }
    assert_equal([{ endpoint: "GET custom" }], seen)
  end

  def test_invalid_options
    accepted = "label must be :normalized, :raw, or a Proc (or object with #call) taking the Rack env"
    [:foo, "raw", 42, nil, ->(a, b) { [a, b] }, -> {}].each do |bad|
      err = assert_raise(ArgumentError) { Rperf::Middleware.new(app([]), label: bad) }
      assert_equal("#{accepted}, got #{bad.inspect}", err.message)
    end
    err = assert_raise(ArgumentError) { Rperf::Middleware.new(app([]), label_key: "endpoint") }
    assert_equal('label_key must be a Symbol, got "endpoint"', err.message)
    [proc {}, ->(e) { e }, ->(*a) { a }, method(:env)].each do |ok|
      assert_nothing_raised(ok.inspect) { Rperf::Middleware.new(app([]), label: ok) }
    end
  end

  # The C fast path (ruby/request_label.c) labels a request this thread
  # labelled recently from the env's bytes; its label set must be the one
  # the Ruby path gives, encoding included. Every pair of method and path
  # encodings, each after every other with the same bytes: a fast path that
  # chose another encoding would hit the other one's memo entry.
  def test_fast_path_gives_the_ruby_paths_label
    encs = [Encoding::UTF_8, Encoding::US_ASCII, Encoding::BINARY, Encoding::ISO_8859_1]
    paths = ["/users/12", "/users/\xff/12".dup.force_encoding("UTF-8")]
    combos = encs.product(encs).flat_map do |me, pe|
      paths.map { |p| ["GET".dup.force_encoding(me), p.dup.force_encoding(pe)] }
    end
    %i[normalized raw].each do |label|
      seen = []
      mw = Rperf::Middleware.new(->(_e) { seen << Rperf.labels[:endpoint] }, label: label)
      expected = lambda do |m, p|
        path = label == :normalized ? Rperf::Middleware.normalize(p) : p
        "#{m} #{path}"
      end
      fast = 0
      Rperf.start(frequency: 1000, mode: :wall) do
        combos.each do |m1, p1|
          combos.each do |m2, p2|
            3.times { mw.call(env(p1, m1)) }
            fast += 1 if Rperf._c_label_request(:endpoint, env(p2, m2), label == :normalized).tap { |t| Rperf._c_set_label(t) if t }
            seen.clear
            mw.call(env(p2, m2))
            want = expected.(m2, p2)
            assert_equal([want, want.encoding], [seen[0], seen[0].encoding],
                         "#{label}: #{[m2.encoding, p2.inspect, p2.encoding]} after #{[m1.encoding, p1.inspect, p1.encoding]}")
          end
        end
      end
      assert_operator(fast, :>, 0, "#{label}: the fast path was taken")
    end
  end

  # A request whose label set exists is labelled without allocating: from
  # the thread's memo, or, on a thread with no labels and no memo yet (a
  # fresh thread of a thread-per-connection server), from the label table
  # by the set's bytes.
  def test_known_endpoint_allocates_nothing
    mw = Rperf::Middleware.new(->(_e) { nil })
    e = env("/users/12")
    allocs = lambda do |n|
      before = GC.stat(:total_allocated_objects)
      n.times { mw.call(e) }
      GC.stat(:total_allocated_objects) - before
    end
    Rperf.start(frequency: 1000) do
      3.times { mw.call(e) }
      allocs.(1) # warms the lambda's own call sites
      assert_equal(0, allocs.(100), "warm thread")
      assert_equal(0, Thread.new { allocs.(1) }.value, "fresh thread, first request")
      assert_equal(0, Thread.new { allocs.(100) }.value, "fresh thread")
      Rperf.label(tenant: "a") do
        2.times { mw.call(e) } # the merged set is made, then found and memoised
        assert_equal(0, allocs.(100), "inside an outer label, from the memo")
      end
    end
  end

  # Paths around the fast path's buffer and memo-key limits (values of
  # ~140-170 bytes) are labelled exactly, folded or not.
  def test_long_paths_at_the_buffer_limits
    seen = []
    mw = Rperf::Middleware.new(->(_e) { seen << Rperf.labels[:endpoint] })
    raw = Rperf::Middleware.new(->(_e) { seen << Rperf.labels[:endpoint] }, label: :raw)
    paths = (120..175).flat_map { |n| ["/" + ("a" * (n - 1)), "/#{'b' * (n - 8)}/1234567"] }
    Rperf.start(frequency: 1000) { paths.each { |p| 3.times { mw.call(env(p)); raw.call(env(p)) } } }
    want = paths.flat_map { |p| ["GET #{Rperf::Middleware.normalize(p)}", "GET #{p}"] * 3 }
    assert_equal(want, seen)
  end

  # Envs the fast path leaves to the Ruby path get the same labels: a
  # default proc, a Hash subclass, a String subclass, a missing header,
  # singleton methods on the env or the path.
  def test_unusual_envs_are_labelled_as_before
    seen = []
    mw = Rperf::Middleware.new(->(_e) { seen << Rperf.labels[:endpoint] })
    sub_hash = Class.new(Hash) { def [](k) = k == "PATH_INFO" ? "/sub/1" : super }
    sub_str = Class.new(String) { def to_s = "/to_s/1" }
    single_hash = { "REQUEST_METHOD" => "GET", "PATH_INFO" => "/x/2" }
    def single_hash.[](k) = k == "PATH_INFO" ? "/single/1" : super
    single_str = +"/x/3"
    def single_str.to_s = "/own/1"
    envs = [Hash.new { |_h, k| k == "PATH_INFO" ? "/default/12" : "PUT" },
            sub_hash.new.merge!("REQUEST_METHOD" => "GET"),
            { "REQUEST_METHOD" => "GET", "PATH_INFO" => sub_str.new("/x/1") },
            { "REQUEST_METHOD" => "GET" },
            single_hash,
            { "REQUEST_METHOD" => "GET", "PATH_INFO" => single_str }]
    Rperf.start(frequency: 1000) { envs.each { |e| 3.times { mw.call(e) } } }
    assert_equal(["PUT /default/:id"] * 3 + ["GET /sub/:id"] * 3 + ["GET /to_s/:id"] * 3 + ["GET "] * 3 +
                 ["GET /single/:id"] * 3 + ["GET /own/:id"] * 3, seen)
  end

  def test_labels_restored_and_not_running
    seen = []
    mw = Rperf::Middleware.new(app(seen))
    # not running: the app runs, nothing is labelled
    assert_equal([200, {}, ["/users/5"]], mw.call(env("/users/5")))
    assert_equal([{}], seen)
    boom = Rperf::Middleware.new(->(_e) { raise IOError, "app failed" })
    Rperf.start(frequency: 1000) do
      Rperf.label(tenant: "a") do
        mw.call(env("/users/6"))
        assert_equal({ tenant: "a" }, Rperf.labels)
        assert_raise_message("app failed") { boom.call(env("/users/7")) }
        assert_equal({ tenant: "a" }, Rperf.labels, "restored after an exception in the app")
      end
    end
    assert_equal({ tenant: "a", endpoint: "GET /users/:id" }, seen.last)
  end

  def test_inside_ractor_workers
    # Built in each worker (any Proc), or built once and shared (a
    # shareable callable); a Proc that is not shareable cannot be shared.
    run = run_child(<<~'RUBY', timeout: 120)
      require "rperf/middleware"
      module Route
        def self.call(env) = "route #{env['PATH_INFO'].count('/')}"
      end
      module App
        def self.call(_env) = [200, {}, [Rperf.labels]]
      end
      shared_default = Ractor.make_shareable(Rperf::Middleware.new(App))
      shared_route = Ractor.make_shareable(Rperf::Middleware.new(App, label: Route))
      # a Proc is shareable when its self is (nil here) and it captures nothing unshareable
      shareable_proc = Ractor.make_shareable(nil.instance_exec { ->(e) { "proc #{e['PATH_INFO'].size}" } })
      shared_proc = Ractor.make_shareable(Rperf::Middleware.new(App, label: shareable_proc))
      isolation = begin
        Ractor.make_shareable(Rperf::Middleware.new(App, label: ->(e) { e }))
        "shared"
      rescue Ractor::IsolationError
        "refused"
      end
      Rperf.start(mode: :cpu, frequency: 1000)
      rs = 2.times.map do |i|
        Ractor.new(i, shared_default, shared_route, shared_proc) do |idx, d, r, pr|
          own = Rperf::Middleware.new(->(_env) { [200, {}, [Rperf.labels]] }, label: ->(e) { "own #{e['PATH_INFO']}" })
          # three calls each: the third of a built-in label takes the C fast path
          [d, r, pr, own].map do |mw|
            3.times.map { mw.call("REQUEST_METHOD" => "GET", "PATH_INFO" => "/users/#{idx}/x")[2][0][:endpoint] }.uniq.join("|")
          end
        end
      end
      got = rs.map { |r| ractor_value(r) }
      Rperf.stop
      child_report(got: got, isolation: isolation)
    RUBY
    assert_child_ok(run)
    assert_equal([["GET /users/:id/x", "route 3", "proc 10", "own /users/0/x"],
                  ["GET /users/:id/x", "route 3", "proc 10", "own /users/1/x"]],
                 run.report["got"])
    assert_equal("refused", run.report["isolation"])
  end
end
