# frozen_string_literal: true

# tests/ruby/test_job_middlewares.rb — Rperf::Sidekiq (ruby/lib/rperf/sidekiq.rb)
# and Rperf::ActiveJob (ruby/lib/rperf/active_job.rb), without the gems:
# a chain built as Sidekiq's server middleware chain calls the middleware,
# and a base class with around_perform runs callbacks as ActiveSupport does.
# A job's samples carry its job and queue labels (the wrapped class for an
# ActiveJob job run through Sidekiq); the job's value and exceptions pass
# through unchanged and the labels it found come back after it; jobs run
# when the profiler is not running; loading the files requires neither gem;
# the 0.6 names are the same constants.

require_relative "helper"
require "fileutils"
require "rperf/sidekiq"
require "rperf/active_job"

def rperf_job_work(seconds) = cpu_spin(seconds)
def rperf_outside_job_work(seconds) = cpu_spin(seconds)

module JobFakes
  # Sidekiq's server middleware chain as Sidekiq 7 runs it: each entry is
  # built with `new(*args)` and called as `call(job_instance, job_hash,
  # queue) { next }`; the innermost block performs the job.
  class Chain
    def initialize
      @entries = []
    end

    def add(klass, *args)
      @entries << [klass, args]
    end

    def invoke(job_instance, job, queue, &block)
      traverse(@entries.map { |k, a| k.new(*a) }, 0, [job_instance, job, queue], &block)
    end

    private

    def traverse(chain, index, args, &block)
      return yield if index >= chain.size

      chain[index].call(*args) { traverse(chain, index + 1, args, &block) }
    end
  end

  # A server middleware that records the labels the job's inner middleware
  # sees (runs inside Rperf::Sidekiq when added after it).
  class Recorder
    def initialize(seen)
      @seen = seen
    end

    def call(_job_instance, _job, _queue)
      @seen << Rperf.labels
      yield
    end
  end

  # A Sidekiq processor: the chain, then perform with the job's args.
  def self.process(chain, job, queue)
    worker = Object.const_get(job["class"]).new
    chain.invoke(worker, job, queue) { worker.perform(*job["args"]) }
  end

  class HardWorker
    def perform(seconds, result)
      rperf_job_work(seconds)
      [Rperf.labels, result]
    end
  end

  class FailingWorker
    def perform(error)
      raise error
    end
  end

  # ActiveJob::Base as far as Rperf::ActiveJob uses it: around_perform
  # (inherited by subclasses, outermost first) run as ActiveSupport runs an
  # around callback with two parameters, `job.instance_exec(job, block,
  # &callback)`, and queue_name. Unlike ActiveSupport, which keeps the
  # innermost block's value itself, the value here is what the callbacks
  # return, so a callback that lost it would fail the tests.
  class JobBase
    def self.around_perform(&callback)
      own_callbacks << callback
    end

    def self.own_callbacks
      @own_callbacks ||= []
    end

    def self.around_callbacks
      inherited = superclass.respond_to?(:around_callbacks) ? superclass.around_callbacks : []
      inherited + own_callbacks
    end

    def self.queue_as(name)
      @queue_name = name.to_s
    end

    def self.queue_name
      @queue_name || (superclass.respond_to?(:queue_name) ? superclass.queue_name : "default")
    end

    def queue_name = self.class.queue_name

    def perform_now(*args)
      run_callbacks(self.class.around_callbacks, 0) { perform(*args) }
    end

    private

    def run_callbacks(chain, index, &perform_block)
      return perform_block.call if index >= chain.size

      instance_exec(self, -> { run_callbacks(chain, index + 1, &perform_block) }, &chain[index])
    end
  end

  class ApplicationJob < JobBase
    include Rperf::ActiveJob
  end

  class SendEmailJob < ApplicationJob
    queue_as :mailers

    def perform(seconds, result)
      rperf_job_work(seconds)
      [Rperf.labels, result]
    end
  end

  class FailingJob < ApplicationJob
    def perform(error)
      raise error
    end
  end

  class JobError < StandardError; end
end

class TestJobMiddlewares < Test::Unit::TestCase
  include RperfTestHelper

  def sidekiq_chain(seen = nil)
    chain = JobFakes::Chain.new
    chain.add(Rperf::Sidekiq)
    chain.add(JobFakes::Recorder, seen) if seen
    chain
  end

  def job_hash(klass, queue, *args, **extra)
    { "class" => klass, "queue" => queue, "args" => args, "jid" => "abc123" }.merge(extra)
  end

  # The label set id `labels` has in the result (asserting it exists).
  def label_id(result, labels)
    sets = result[:label_sets]
    assert_kind_of(Array, sets, "label_sets present\n#{rperf_describe(result)}")
    id = sets.index(labels)
    assert_not_nil(id, "label set #{labels.inspect} in #{sets.inspect}")
    id
  end

  # Every sample of the job's work carries the job's label set, every
  # sample of the work outside the job carries none.
  def assert_job_samples_labelled(result, labels)
    id = label_id(result, labels)
    inside = rperf_samples_with(result, "Object#rperf_job_work")
    outside = rperf_samples_with(result, "Object#rperf_outside_job_work")
    assert_not_empty(inside, rperf_describe(result))
    assert_not_empty(outside, rperf_describe(result))
    assert_equal([id], inside.map { |s| s[3] }.uniq, "the job's samples carry #{labels.inspect}")
    assert_equal([0], outside.map { |s| s[3] }.uniq, "samples after the job carry no labels")
  end

  # ---- Sidekiq -----------------------------------------------------------------

  def test_sidekiq_labels_job_and_queue
    seen = []
    result = nil
    data = Rperf.start(frequency: 1000) do
      result = JobFakes.process(sidekiq_chain(seen), job_hash("JobFakes::HardWorker", "critical", 0.05, :done),
                                "critical")
      rperf_outside_job_work(0.03)
    end
    labels = { job: "JobFakes::HardWorker", queue: "critical" }
    assert_equal([labels, :done], result, "perform's value, and the labels it ran with")
    assert_equal([labels], seen, "later middlewares see the labels too")
    assert_job_samples_labelled(data, labels)
  end

  def test_sidekiq_wrapped_active_job_gets_the_wrapped_class
    data = Rperf.start(frequency: 1000) do
      %w[ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper Sidekiq::ActiveJob::Wrapper].each do |wrapper|
        chain = sidekiq_chain
        job = job_hash(wrapper, "mailers", { "job_class" => "SendEmailJob" }, "wrapped" => "SendEmailJob")
        got = chain.invoke(Object.new, job, "mailers") { rperf_job_work(0.03); Rperf.labels }
        assert_equal({ job: "SendEmailJob", queue: "mailers" }, got, wrapper)
      end
      rperf_outside_job_work(0.03)
    end
    assert_job_samples_labelled(data, { job: "SendEmailJob", queue: "mailers" })
    assert_nil(data[:label_sets].find { |s| s[:job].to_s.include?("Wrapper") }, "no label names the wrapper")
  end

  def test_sidekiq_job_name
    assert_equal("HardWorker", Rperf::Sidekiq.job_name({ "class" => "HardWorker" }))
    assert_equal("MyJob", Rperf::Sidekiq.job_name({ "class" => "Wrapper", "wrapped" => "MyJob" }))
    assert_equal("JobFakes::HardWorker", Rperf::Sidekiq.job_name({ "class" => JobFakes::HardWorker }),
                 "a Class as its name")
    assert_nil(Rperf::Sidekiq.job_name({}))
    assert_nil(Rperf::Sidekiq.job_name(nil))
  end

  def test_sidekiq_exception_propagates_and_labels_restored
    seen = []
    error = JobFakes::JobError.new("job failed")
    Rperf.start(frequency: 1000) do
      Rperf.label(tenant: "a") do
        raised = assert_raise(JobFakes::JobError) do
          JobFakes.process(sidekiq_chain(seen), job_hash("JobFakes::FailingWorker", "default", error), "default")
        end
        assert_same(error, raised, "the job's own exception, unchanged")
        assert_equal({ tenant: "a" }, Rperf.labels, "restored after the job raised")
        # a non-local exit out of the job restores them too
        catch(:stop) { sidekiq_chain.invoke(nil, job_hash("X", "q"), "q") { throw :stop } }
        assert_equal({ tenant: "a" }, Rperf.labels, "restored after a throw out of the job")
      end
      assert_equal({}, Rperf.labels)
    end
    assert_equal([{ tenant: "a", job: "JobFakes::FailingWorker", queue: "default" }], seen)
  end

  def test_sidekiq_nil_queue_removes_the_label
    seen = nil
    got = Rperf.start(frequency: 1000) do
      Rperf.label(queue: "outer") { sidekiq_chain.invoke(nil, { "class" => "W" }, nil) { seen = Rperf.labels } }
    end
    assert_kind_of(Hash, got)
    assert_equal({ job: "W" }, seen)
  end

  def test_sidekiq_not_profiling
    assert_false(Rperf.running?)
    result = JobFakes.process(sidekiq_chain, job_hash("JobFakes::HardWorker", "default", 0.001, 42), "default")
    assert_equal([{}, 42], result, "the job runs and returns its value; nothing is labelled")
    error = JobFakes::JobError.new("not profiling")
    raised = assert_raise(JobFakes::JobError) do
      JobFakes.process(sidekiq_chain, job_hash("JobFakes::FailingWorker", "default", error), "default")
    end
    assert_same(error, raised)
  end

  # ---- ActiveJob ---------------------------------------------------------------

  def test_active_job_labels_job_and_queue
    result = nil
    data = Rperf.start(frequency: 1000) do
      result = JobFakes::SendEmailJob.new.perform_now(0.05, :sent)
      rperf_outside_job_work(0.03)
    end
    labels = { job: "JobFakes::SendEmailJob", queue: "mailers" }
    assert_equal([labels, :sent], result)
    assert_job_samples_labelled(data, labels)
  end

  def test_active_job_default_queue_and_subclass_name
    klass = Class.new(JobFakes::ApplicationJob) { def perform = Rperf.labels }
    JobFakes.const_set(:ReportJob, klass)
    seen = nil
    Rperf.start(frequency: 1000) { seen = JobFakes::ReportJob.new.perform_now }
    assert_equal({ job: "JobFakes::ReportJob", queue: "default" }, seen)
  ensure
    JobFakes.send(:remove_const, :ReportJob) if JobFakes.const_defined?(:ReportJob, false)
  end

  def test_active_job_exception_propagates_and_labels_restored
    error = JobFakes::JobError.new("perform failed")
    Rperf.start(frequency: 1000) do
      Rperf.label(tenant: "b") do
        raised = assert_raise(JobFakes::JobError) { JobFakes::FailingJob.new.perform_now(error) }
        assert_same(error, raised, "the job's own exception, unchanged")
        assert_equal({ tenant: "b" }, Rperf.labels, "restored after the job raised")
        result = JobFakes::SendEmailJob.new.perform_now(0.001, :ok)
        assert_equal([{ tenant: "b", job: "JobFakes::SendEmailJob", queue: "mailers" }, :ok], result)
        assert_equal({ tenant: "b" }, Rperf.labels, "restored after the job")
      end
    end
  end

  def test_active_job_not_profiling
    assert_false(Rperf.running?)
    assert_equal([{}, 7], JobFakes::SendEmailJob.new.perform_now(0.001, 7))
    error = JobFakes::JobError.new("not profiling")
    assert_same(error, assert_raise(JobFakes::JobError) { JobFakes::FailingJob.new.perform_now(error) })
  end

  def test_active_job_callback_added_once
    assert_equal(1, JobFakes::ApplicationJob.own_callbacks.size)
    sub = Class.new(JobFakes::ApplicationJob) { include Rperf::ActiveJob }
    sub.include(Rperf::ActiveJob)
    assert_equal(0, sub.own_callbacks.size, "inherited, not added again")
    assert_equal(1, sub.around_callbacks.size)
    JobFakes::ApplicationJob.include(Rperf::ActiveJob)
    assert_equal(1, JobFakes::ApplicationJob.own_callbacks.size, "a second include adds nothing")
  end

  def test_active_job_refuses_a_class_without_around_perform
    [Class.new, Module.new, Object].each do |target|
      ancestors = target.ancestors
      err = assert_raise(ArgumentError) { target.include(Rperf::ActiveJob) }
      assert_equal("Rperf::ActiveJob must be included in an ActiveJob class (one that responds to " \
                   "around_perform, such as ApplicationJob < ActiveJob::Base), got #{target.inspect}",
                   err.message)
      assert_equal(ancestors, target.ancestors, "the refused include leaves #{target.inspect} unchanged")
    end
  end

  # ---- both --------------------------------------------------------------------

  def test_0_6_names
    assert_same(Rperf::Sidekiq, Rperf::SidekiqMiddleware)
    assert_same(Rperf::ActiveJob, Rperf::ActiveJobMiddleware)
    assert_kind_of(Class, Rperf::Sidekiq)
    assert_instance_of(Module, Rperf::ActiveJob)
  end

  # Neither file requires Sidekiq, ActiveJob or ActiveSupport, not even
  # tentatively: with stand-ins for them on the load path that note being
  # loaded and then raise, both load and work.
  def test_loading_requires_neither_gem
    Dir.mktmpdir("rperf-jobs") do |dir|
      %w[sidekiq sidekiq/api active_job active_job/base active_support active_support/concern].each do |lib|
        path = File.join(dir, "#{lib}.rb")
        FileUtils.mkdir_p(File.dirname(path))
        File.write(path, "($rperf_stand_ins ||= []) << #{lib.inspect}\nraise #{"#{lib} was required".inspect}\n")
      end
      run = run_child(<<~'RUBY', ruby_args: ["-I", dir])
        require "rperf/sidekiq"
        require "rperf/active_job"
        class Job
          def self.around_perform(&blk) = (@cb = blk)
          def self.cb = @cb
          include Rperf::ActiveJob
          def queue_name = "q"
        end
        Rperf.start(frequency: 100)
        sk = Rperf::Sidekiq.new.call(nil, { "class" => "W" }, "q") { Rperf.labels }
        aj = Job.new.instance_exec(Job.new, -> { Rperf.labels }, &Job.cb)
        Rperf.stop
        child_report(stand_ins: $rperf_stand_ins.to_a,
                     features: $LOADED_FEATURES.grep(/sidekiq|active_?job|active_?support/i),
                     constants: %w[Sidekiq ActiveJob ActiveSupport].select { |c| Object.const_defined?(c) },
                     sk: sk, aj: aj)
      RUBY
      assert_child_ok(run)
      assert_equal([], run.report["stand_ins"], "no stand-in was loaded")
      assert_equal(%w[rperf/sidekiq.rb rperf/active_job.rb],
                   run.report["features"].map { |f| f.split("/").last(2).join("/") })
      assert_equal([], run.report["constants"])
      assert_equal({ "job" => "W", "queue" => "q" }, run.report["sk"])
      assert_equal({ "job" => "Job", "queue" => "q" }, run.report["aj"])
    end
  end

  def test_inside_ractors
    run = run_child(<<~'RUBY')
      require "rperf/sidekiq"
      require "rperf/active_job"
      Warning[:experimental] = false
      class RJob
        def queue_name = "rq"
      end
      shared = Ractor.make_shareable(Rperf::Sidekiq.new)
      Rperf.start(frequency: 1000)
      rs = 2.times.map do |i|
        Ractor.new(i, shared) do |idx, mw|
          own = Rperf::Sidekiq.new
          [mw, own].map do |m|
            m.call(nil, { "class" => "Worker#{idx}" }, "q#{idx}") { cpu_spin(0.02); Rperf.labels }
          end + [RJob.new.instance_exec(RJob.new, -> { Rperf.labels }, &Rperf::ActiveJob::AROUND_PERFORM),
                 Rperf.labels]
        end
      end
      got = rs.map { |r| ractor_value(r) }
      data = Rperf.stop
      child_report(got: got, sets: data[:label_sets].uniq)
    RUBY
    assert_child_ok(run)
    assert_equal([0, 1].map do |i|
      w = { "job" => "Worker#{i}", "queue" => "q#{i}" }
      [w, w, { "job" => "RJob", "queue" => "rq" }, {}]
    end, run.report["got"])
    assert_include(run.report["sets"], { "job" => "Worker1", "queue" => "q1" })
  end
end
