# frozen_string_literal: true
# Rperf.label / Rperf.labels and label_sets in results.
require_relative "helper"

def rperf_labelled_work(seconds) = cpu_spin(seconds)
def rperf_unlabelled_work(seconds) = cpu_spin(seconds)
def rperf_other_thread_work(seconds) = cpu_spin(seconds)

class TestLabels < Test::Unit::TestCase
  include RperfTestHelper

  def label_id(result, hash)
    sets = result[:label_sets]
    assert_kind_of(Array, sets, "label_sets present\n#{rperf_describe(result)}")
    id = sets.index(hash)
    assert_not_nil(id, "label set #{hash.inspect} in #{sets.inspect}")
    id
  end

  def test_block_scoping_and_merge
    Rperf.start(frequency: 100)
    assert_equal({}, Rperf.labels)
    Rperf.label(request: "a") do
      assert_equal({ request: "a" }, Rperf.labels)
      Rperf.label(user: 7) do
        assert_equal({ request: "a", user: 7 }, Rperf.labels, "nested labels merge")
        Rperf.label(request: "b") do
          assert_equal({ request: "b", user: 7 }, Rperf.labels, "inner value overrides")
        end
        assert_equal({ request: "a", user: 7 }, Rperf.labels, "restored after inner block")
      end
      assert_equal({ request: "a" }, Rperf.labels)
    end
    assert_equal({}, Rperf.labels, "restored after outer block")
  end

  def test_block_returns_block_value
    Rperf.start(frequency: 100)
    assert_equal(42, Rperf.label(k: 1) { 42 })
    Rperf.stop
    assert_equal(43, Rperf.label(k: 1) { 43 }, "block runs and returns its value when not running")
  end

  def test_restored_on_exception
    Rperf.start(frequency: 100)
    Rperf.label(outer: 1) do
      err = assert_raise(RuntimeError) do
        Rperf.label(inner: 2) { raise "inside label" }
      end
      assert_equal("inside label", err.message)
      assert_equal({ outer: 1 }, Rperf.labels, "labels restored after the block raised")
    end
    assert_equal({}, Rperf.labels)
  end

  def test_nil_deletes_key
    Rperf.start(frequency: 100)
    Rperf.label(a: 1, b: 2) do
      Rperf.label(a: nil) do
        assert_equal({ b: 2 }, Rperf.labels)
      end
      assert_equal({ a: 1, b: 2 }, Rperf.labels)
    end
    Rperf.label(x: 1)
    Rperf.label(x: nil)
    assert_equal({}, Rperf.labels)
  end

  def test_without_block_persists
    Rperf.start(frequency: 100)
    Rperf.label(tenant: "acme")
    assert_equal({ tenant: "acme" }, Rperf.labels)
    rperf_labelled_work(0.05)
    result = Rperf.stop
    id = label_id(result, { tenant: "acme" })
    assert(rperf_samples_with(result, "Object#rperf_labelled_work").all? { |s| s[3] == id })
  end

  # Label sets are interned by content: equal sets share one id whatever the
  # key order or the values' encodings; values that are not shareable are
  # stored as frozen String copies.
  def test_label_sets_interned_by_content
    Rperf.start(frequency: 1000)
    mutable = +"GET /a"
    ids = []
    # _c_get_label returns a token: the run's generation << 32 | the set's id
    def ids.<<(token) = super(token & 0xffff_ffff)
    Rperf.label(a: 1, b: "\xff".b, c: "ü") { ids << Rperf.send(:_c_get_label) }
    Rperf.label(c: "ü", a: 1, b: "\xff".b) { ids << Rperf.send(:_c_get_label) }
    Rperf.label(a: 1, b: "\xfe".b, c: "ü") { ids << Rperf.send(:_c_get_label) }
    Rperf.label(path: mutable) do
      ids << Rperf.send(:_c_get_label)
      assert_predicate(Rperf.labels[:path], :frozen?, "a mutable String is stored frozen")
      assert(Ractor.shareable?(Rperf.labels), "label sets are shareable")
    end
    mutable << "/changed"
    Rperf.label(path: "GET /a") { ids << Rperf.send(:_c_get_label) }
    assert_equal(ids[0], ids[1], "key order does not matter")
    assert_not_equal(ids[0], ids[2], "different bytes are a different set")
    assert_equal(ids[3], ids[4], "the stored copy is not affected by later mutation")
    # a result lists the sets its samples use
    Rperf.label(b: "\xff".b, a: 1, c: "ü") { rperf_labelled_work(0.03) }
    Rperf.label(path: "GET /a") { rperf_labelled_work(0.03) }
    sets = Rperf.stop[:label_sets]
    assert_equal({ a: 1, b: "\xff".b, c: "ü" }, sets[ids[0]])
    assert_equal({ path: "GET /a" }, sets[ids[3]])
  end

  def test_labels_when_not_running
    assert_equal({}, Rperf.labels)
    ran = false
    Rperf.label(k: 1) { ran = true }
    assert_true(ran)
  end

  def test_samples_carry_label_set_id
    each_combo do |backend, mode|
      result = Rperf.start(frequency: 1000, mode: mode, backend: backend) do
        rperf_unlabelled_work(0.05)
        Rperf.label(request: "abc", n: 1) { rperf_labelled_work(0.08) }
        rperf_unlabelled_work(0.05)
      end
      ctx = "#{backend}/#{mode}\n#{rperf_describe(result)}"
      sets = result[:label_sets]
      assert_kind_of(Array, sets, ctx)
      assert_equal({}, sets[0], "label_sets[0] is the empty set")
      sets.drop(1).each do |h|
        assert_kind_of(Hash, h)
        assert_true(h.frozen?, "label set hashes are frozen")
        h.each_key { |k| assert_kind_of(Symbol, k) }
      end
      id = label_id(result, { request: "abc", n: 1 })
      assert_operator(id, :>=, 1)
      labelled = rperf_samples_with(result, "Object#rperf_labelled_work")
      unlabelled = rperf_samples_with(result, "Object#rperf_unlabelled_work")
      assert_not_empty(labelled, ctx)
      assert_not_empty(unlabelled, ctx)
      labelled.each { |s| assert_equal(id, s[3], "labelled sample carries the id #{ctx}") }
      unlabelled.each { |s| assert_equal(0, s[3], "unlabelled sample has id 0 #{ctx}") }
      assert_operator(id, :<, sets.size)
      result[:aggregated_samples].each { |s| assert_operator(s[3], :<, sets.size, "every id indexes label_sets") }
    end
  end

  def test_identical_label_sets_interned_once
    result = Rperf.start(frequency: 1000) do
      3.times { Rperf.label(k: "same") { rperf_labelled_work(0.01) } }
      Rperf.label(k: "other") { rperf_labelled_work(0.01) }
      Rperf.label(k: "same") { rperf_labelled_work(0.01) }
    end
    sets = result[:label_sets]
    # an id no sample uses reads as {} (a block no tick reached: on a busy
    # machine the timer can miss 10 ms), so uniqueness is of the sets used
    used = result[:aggregated_samples].map { |s| s[3] }.uniq.map { |id| sets[id] }
    assert_equal(used.size, used.uniq.size, "no duplicate label sets: #{sets.inspect}")
    assert_equal(1, sets.count({ k: "same" }))
    assert_operator(sets.count({ k: "other" }), :<=, 1, sets.inspect)
    if (other = sets.index({ k: "other" }))
      assert_operator(sets.index({ k: "same" }), :<, other, "ids in order of first appearance")
    end
  end

  def test_values_kept_as_given
    result = Rperf.start(frequency: 1000) do
      Rperf.label(int: 42, str: "s", sym: :v) { rperf_labelled_work(0.03) }
    end
    assert_include(result[:label_sets], { int: 42, str: "s", sym: :v })
  end

  def test_labels_are_per_thread
    each_combo do |backend, mode|
      gate = Queue.new
      thread_labels = nil
      result = Rperf.start(frequency: 1000, mode: mode, backend: backend) do
        Rperf.label(owner: "main") do
          # The main thread works labelled, then creates a second thread
          # inside the labelled block and joins it. (Work is not concurrent on
          # purpose: attribution under contention is tested in test_threads.)
          rperf_labelled_work(0.1)
          t = Thread.new do
            thread_labels = Rperf.labels
            gate.pop
            rperf_other_thread_work(0.1)
          end
          gate << :go
          t.join
        end
      end
      ctx = "#{backend}/#{mode}\n#{rperf_describe(result)}"
      assert_equal({}, thread_labels, "a new thread starts without labels")
      id = label_id(result, { owner: "main" })
      other = rperf_samples_with(result, "Object#rperf_other_thread_work")
      mine = rperf_samples_with(result, "Object#rperf_labelled_work")
      assert_not_empty(other, ctx)
      assert_not_empty(mine, ctx)
      other.each { |s| assert_equal(0, s[3], "other thread is unlabelled #{ctx}") }
      mine.each { |s| assert_equal(id, s[3], "labelling thread's samples carry its label #{ctx}") }
      assert_empty(other.map { |s| s[2] } & mine.map { |s| s[2] }, "different thread_seq #{ctx}")
    end
  end

  def test_label_in_other_thread
    RPERF_BACKENDS.each do |backend|
      result = Rperf.start(frequency: 1000, backend: backend) do
        t = Thread.new do
          Rperf.label(worker: "bg") { rperf_other_thread_work(0.08) }
          Rperf.labels
        end
        rperf_unlabelled_work(0.05)
        assert_equal({}, t.value, "thread's labels restored after its block")
        assert_equal({}, Rperf.labels, "main thread unaffected")
      end
      id = label_id(result, { worker: "bg" })
      other = rperf_samples_with(result, "Object#rperf_other_thread_work")
      assert_not_empty(other)
      other.each { |s| assert_equal(id, s[3], backend.to_s) }
      rperf_samples_with(result, "Object#rperf_unlabelled_work").each { |s| assert_equal(0, s[3]) }
    end
  end

  def test_gc_samples_carry_labels
    RPERF_MODES.each do |mode|
      result = Rperf.start(frequency: 1000, mode: mode) do
        Rperf.label(phase: "alloc") { rperf_alloc_work(0.2) }
      end
      id = label_id(result, { phase: "alloc" })
      gc = (rperf_samples_with_leaf(result, GC_MARKING) + rperf_samples_with_leaf(result, GC_SWEEPING))
           .select { |f, *| rperf_labels_of(f).include?("Object#rperf_alloc_work") }
      assert_not_empty(gc, "GC samples on the allocating stack (#{mode})\n#{rperf_describe(result)}")
      gc.each { |s| assert_equal(id, s[3], "GC sample carries the thread's label (#{mode})") }
    end
  end

  def test_gvl_samples_carry_labels
    RPERF_BACKENDS.each do |backend|
      result = Rperf.start(frequency: 1000, mode: :wall, backend: backend) do
        Rperf.label(phase: "io") { sleep 0.05 }
      end
      id = label_id(result, { phase: "io" })
      blocked = rperf_samples_with_leaf(result, GVL_BLOCKED)
      assert_not_empty(blocked, "#{backend}\n#{rperf_describe(result)}")
      assert(blocked.any? { |s| s[3] == id }, "[GVL blocked] of a labelled sleep carries the label (#{backend})")
    end
  end

  def test_snapshot_label_sets_not_mutated_later
    Rperf.start(frequency: 1000)
    Rperf.label(first: 1) { rperf_labelled_work(0.02) }
    snap = Rperf.snapshot
    before = Marshal.load(Marshal.dump(snap[:label_sets]))
    Rperf.label(second: 2) { rperf_labelled_work(0.02) }
    Rperf.label(third: 3) { rperf_labelled_work(0.02) }
    result = Rperf.stop
    assert_equal(before, snap[:label_sets], "a snapshot's label_sets is a copy, not the live table")
    assert_include(result[:label_sets], { second: 2 })
    assert_include(result[:label_sets], { third: 3 })
    assert_not_same(snap[:label_sets], result[:label_sets])
  end

  def test_label_sets_reset_between_runs
    r1 = Rperf.start(frequency: 1000) { Rperf.label(run: 1) { rperf_labelled_work(0.03) } }
    r2 = Rperf.start(frequency: 1000) { Rperf.label(run: 2) { rperf_labelled_work(0.03) } }
    assert_include(r1[:label_sets], { run: 1 })
    id2 = label_id(r2, { run: 2 })
    samples = rperf_samples_with(r2, "Object#rperf_labelled_work")
    assert_not_empty(samples)
    samples.each { |s| assert_equal({ run: 2 }, r2[:label_sets][s[3]], "ids resolve within their own run") }
    assert_operator(id2, :>=, 1)
    assert_equal({}, Rperf.labels, "labels do not leak out of a run's block")
  end

  def test_label_ids_from_previous_run_never_dangle
    # A label set without a block persists on the thread; whatever a new run
    # does with it, every id in the new result must index its own label_sets.
    Rperf.start(frequency: 100)
    Rperf.label(sticky: true)
    Rperf.label(sticky2: true)
    Rperf.stop
    r = Rperf.start(frequency: 1000) { rperf_unlabelled_work(0.03) }
    samples = rperf_samples_with(r, "Object#rperf_unlabelled_work")
    assert_not_empty(samples)
    r[:aggregated_samples].each do |s|
      if r[:label_sets]
        assert_operator(s[3], :<, r[:label_sets].size, "id #{s[3]} indexes label_sets #{r[:label_sets].inspect}")
      else
        assert_equal(0, s[3], "no label_sets in the result, so every id is 0")
      end
    end
  ensure
    Rperf.start(frequency: 100) { Rperf.label(sticky: nil, sticky2: nil) }
  end

  # Applying the same labels again and again takes the memo of recent
  # applications (ruby/label_memo.c); it must answer exactly as the full
  # path: per current set, value and encoding, never a set another window
  # or run gave the same id, and without hiding overflow counts.
  def test_repeated_labels_follow_the_current_set_and_value
    Rperf.start(frequency: 1000)
    values = %w[a b c d e f] + ["a".b, "é", "é".encode("ISO-8859-1")]
    3.times do
      %w[x y].each do |tenant|
        Rperf.label(tenant: tenant) do
          values.each do |v|
            Rperf.label(endpoint: v) do
              got = Rperf.labels
              assert_equal({ tenant: tenant, endpoint: v }, got)
              assert_equal(v.encoding, got[:endpoint].encoding, v.inspect)
            end
          end
          Rperf.label(tenant: nil) { assert_equal({}, Rperf.labels) }
        end
      end
    end
  ensure
    Rperf.stop
  end

  def test_repeated_labels_after_their_set_was_freed
    Rperf.start(frequency: 1000)
    3.times { Rperf.label(endpoint: "a") { assert_equal({ endpoint: "a" }, Rperf.labels) } }
    Rperf.snapshot(clear: true)   # "a" quarantined
    Rperf.snapshot(clear: true)   # "a" freed, its id free
    3.times { Rperf.label(endpoint: "b") { assert_equal({ endpoint: "b" }, Rperf.labels) } }
    Rperf.label(endpoint: "a") do
      assert_equal({ endpoint: "a" }, Rperf.labels)
      rperf_labelled_work(0.02)
    end
    res = Rperf.snapshot(clear: true)
    samples = rperf_samples_with(res, "Object#rperf_labelled_work")
    assert_not_empty(samples, rperf_describe(res))
    samples.each { |s| assert_equal({ endpoint: "a" }, res[:label_sets][s[3]]) }
  ensure
    Rperf.stop
  end

  def test_repeated_labels_across_runs
    Rperf.start(frequency: 1000) { 3.times { Rperf.label(endpoint: "a") { } } }
    Rperf.start(frequency: 1000) do
      Rperf.label(endpoint: "b") { }  # the first set of this run: the id "a" had
      assert_equal({ endpoint: "a" }, Rperf.label(endpoint: "a") { Rperf.labels })
    end
  end

  def test_repeated_labels_past_the_cap_are_all_counted
    Rperf.start(frequency: 1000, max_label_sets: 1)
    3.times { Rperf.label(endpoint: "a") { } }
    5.times { Rperf.label(endpoint: "b") { assert_equal({ rperf_label_overflow: true }, Rperf.labels) } }
    assert_equal(5, Rperf.snapshot[:label_sets_overflowed])
  ensure
    Rperf.stop
  end

  def test_labels_in_raw_mode
    result = Rperf.start(frequency: 1000, aggregate: false) do
      Rperf.label(raw: "yes") { rperf_labelled_work(0.05) }
    end
    id = label_id(result, { raw: "yes" })
    raw = rperf_samples_with(result, "Object#rperf_labelled_work", key: :raw_samples)
    assert_not_empty(raw)
    raw.each { |s| assert_equal(id, s[3]) }
  end

  # ---- label sets live in C memory; Ruby objects only on request ----------

  LabelPoint = Struct.new(:x, :y)

  COMMON_VALUES = {
    str: "GET /users/1", bin: "\xff\x00".b, latin: "caf\xe9".dup.force_encoding("ISO-8859-1"), empty: "",
    sym: :checkout, int: 42, neg: -7, big: 2**70, nbig: -(3**50), float: 1.25, nzero: -0.0,
    yes: true, no: false
  }.freeze

  def assert_same_values(expected, got, where)
    assert_equal(expected, got, where)
    assert_equal(expected.keys, got.keys, "#{where}: keys in the order given")
    expected.each do |k, v|
      assert_equal(v.class, got[k].class, "#{where}: #{k} keeps its class")
      assert_equal(v.encoding, got[k].encoding, "#{where}: #{k} keeps its encoding") if v.is_a?(String)
      assert_equal(v.to_s, got[k].to_s, "#{where}: #{k} (-0.0 stays -0.0)") if v.is_a?(Float)
    end
    assert_predicate(got, :frozen?, where)
    assert(Ractor.shareable?(got), "#{where}: shareable")
  end

  def test_common_label_values_come_back_equal_and_of_their_class
    Rperf.start(frequency: 1000)
    Rperf.label(**COMMON_VALUES) do
      assert_same_values(COMMON_VALUES, Rperf.labels, "Rperf.labels")
      rperf_labelled_work(0.03)   # samples, so the result lists the set
    end
    Rperf.label(tenant: "acme") do
      Rperf.label(**COMMON_VALUES) do
        assert_same_values({ tenant: "acme", **COMMON_VALUES }, Rperf.labels, "merged into a set")
      end
    end
    sets = Rperf.stop[:label_sets]
    got = sets.find { |h| h.key?(:big) && !h.key?(:tenant) }
    assert_not_nil(got, sets.inspect)
    assert_same_values(COMMON_VALUES, got, ":label_sets")
  end

  # Shareable values of other classes are kept as the objects given (a
  # frozen Struct, a Range, a Rational, a Class); values that are not
  # shareable become the frozen String of their to_s.
  def test_other_label_values_are_kept_as_given
    point = LabelPoint.new(1, 2).freeze
    range = (1..3)
    Rperf.start(frequency: 1000)
    Rperf.label(point: point, range: range, ratio: 3r, klass: String, list: [1, 2]) do
      rperf_labelled_work(0.03)   # samples, so the result lists the set
      got = Rperf.labels
      assert_same(point, got[:point])
      assert_same(range, got[:range])
      assert_equal(3r, got[:ratio])
      assert_same(String, got[:klass])
      assert_equal("[1, 2]", got[:list], "a mutable value is its to_s")
      assert_predicate(got[:list], :frozen?)
    end
    sets = Rperf.stop[:label_sets]
    assert_include(sets, { point: point, range: range, ratio: 3r, klass: String, list: "[1, 2]" })
  end

  # Label sets are bytes in C: 20,000 distinct sets add no Ruby object that
  # stays alive (the profiler's GC marking is the same whatever their
  # number), where a Hash and a String per set would add ~40,000.
  def live_slots_with_label_sets(count)
    Rperf.start(frequency: 100)
    count.times { |i| Rperf.label(url: "GET /users/#{i}") }
    Rperf.label(url: nil)
    GC.start(full_mark: true, immediate_sweep: true)
    GC.start(full_mark: true, immediate_sweep: true)
    GC.stat(:heap_live_slots)
  ensure
    Rperf.stop
  end

  def test_many_label_sets_add_no_live_ruby_objects
    live_slots_with_label_sets(20_000)   # warm up: code paths, memo, table capacity
    one = live_slots_with_label_sets(1)
    many = live_slots_with_label_sets(20_000)
    assert_operator(many - one, :<, 2000,
                    "live slots: #{one} with 1 label set, #{many} with 20,000 (a Hash and String each would be ~40,000)")
  end

  # snapshot(clear: true) quarantines the sets no thread uses, then frees
  # them: their ids are given to new sets, every result names the sets its
  # samples used (and only those: the others read as the empty set), and
  # objects kept for freed sets can be collected.
  def test_snapshot_clear_releases_and_reuses_label_sets
    Rperf.start(frequency: 1000)
    weak = ObjectSpace::WeakMap.new
    50.times do |i|
      point = LabelPoint.new(i, -i).freeze
      weak[point] = true
      Rperf.label(path: "/old/#{i}", point: point) { }
    end
    assert_equal(51, Rperf.snapshot(clear: true)[:label_sets].size, "50 sets and the empty one")
    Rperf.snapshot(clear: true)   # quarantined ...
    Rperf.snapshot(clear: true)   # ... then freed
    ids = {}
    50.times do |i|
      Rperf.label(path: "/new/#{i}") { ids[i] = Rperf.send(:_c_get_label) & 0xffff_ffff }
    end
    Rperf.label(path: "/new/7") { rperf_labelled_work(0.03) }
    res = Rperf.snapshot(clear: true)
    assert_equal(51, res[:label_sets].size, "freed ids are given to new sets")
    assert_equal(ids.values.sort, ids.values.uniq.sort, "50 distinct ids")
    assert(ids.values.all? { |id| id.between?(1, 50) }, "freed ids are given to new sets: #{ids.values.sort}")
    # a set is named when a sample used it (/new/7's work; a tick or a GC
    # step may land in any of the short blocks too), and reads {} otherwise
    used = res[:aggregated_samples].map { |s| s[3] }.uniq
    assert_include(used, ids[7])
    ids.each { |i, id| assert_equal(used.include?(id) ? { path: "/new/#{i}" } : {}, res[:label_sets][id]) }
    samples = rperf_samples_with(res, "Object#rperf_labelled_work")
    assert_not_empty(samples, rperf_describe(res))
    samples.each { |s| assert_equal({ path: "/new/7" }, res[:label_sets][s[3]]) }
    GC.start(full_mark: true, immediate_sweep: true)
    GC.start
    assert_operator(weak.keys.size, :<, 50, "objects kept for freed label sets can be collected")
  ensure
    Rperf.stop
  end
end
