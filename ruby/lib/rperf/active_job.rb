# frozen_string_literal: true

# Rperf::ActiveJob — include it in a job class (usually ApplicationJob) and
# every job of that class and its subclasses runs labelled
# `job: "ClassName"` and `queue: "name"` (the job's queue_name).
#
#   require "rperf/active_job"
#   class ApplicationJob < ActiveJob::Base
#     include Rperf::ActiveJob
#   end
#
# Including it adds one around_perform callback; the class must respond to
# around_perform (ActiveJob::Base and its subclasses do), else the include
# raises ArgumentError and leaves the class unchanged. Including it again
# in a subclass, or twice, adds nothing: the callback is inherited.
#
# The job runs exactly as it would without it: perform's return value and
# exceptions pass through unchanged, and the thread's previous labels come
# back after the job. The job is a profile block (Rperf.profile): a run
# started with `defer: true` samples only jobs. When the profiler is not
# running Rperf.profile changes nothing and just runs the job. It only
# calls Rperf.profile, so it works in any Ractor.
#
# ActiveJob itself is not required: this file loads without the gem (the
# module uses no ActiveSupport::Concern, only Ruby's own include hooks).
# With Sidekiq as the queue adapter, Rperf::Sidekiq gives the same job and
# queue labels; using both is harmless (the inner label sets the same
# values).
#
# Rperf::ActiveJobMiddleware is the name rperf 0.6 gave it.

require "rperf"

module Rperf
  module ActiveJob
    # The around_perform callback; ActiveSupport runs it with the job and
    # the rest of the chain. Shareable, so any Ractor may read it.
    AROUND_PERFORM = Ractor.make_shareable(proc do |job, block|
      Rperf.profile(job: job.class.name, queue: job.queue_name) { block.call }
    end)

    # Checked before the module joins the class's ancestors, so a refused
    # include changes nothing; the callback is added once, to the first
    # class in a hierarchy that includes the module.
    def self.append_features(base)
      unless base.respond_to?(:around_perform)
        raise ArgumentError,
              "Rperf::ActiveJob must be included in an ActiveJob class (one that responds to " \
              "around_perform, such as ApplicationJob < ActiveJob::Base), got #{base.inspect}"
      end
      return false if base.include?(self)

      super
      base.around_perform(&AROUND_PERFORM)
      base
    end
  end

  ActiveJobMiddleware = ActiveJob
end
