# frozen_string_literal: true

# Rperf::Sidekiq — Sidekiq server middleware that labels every job's
# samples with `job: "ClassName"` and `queue: "name"`.
#
#   require "rperf/sidekiq"
#   Sidekiq.configure_server do |config|
#     config.server_middleware { |chain| chain.add Rperf::Sidekiq }
#   end
#
# An ActiveJob job run through Sidekiq's adapter has the adapter's wrapper
# in job["class"] and the job's own class in job["wrapped"]; the label is
# the wrapped class, so it names the same job as Rperf::ActiveJob would.
#
# The job runs exactly as it would without the middleware: its return
# value and exceptions pass through unchanged, and the thread's previous
# labels come back after it. The job is a profile block (Rperf.profile):
# a run started with `defer: true` samples only jobs. When the profiler is
# not running Rperf.profile changes nothing and just runs the job. It only
# calls Rperf.profile, so it works in any Ractor, and it holds no state,
# so one instance may serve every thread.
#
# Sidekiq itself is not required: this file loads without the gem, and
# the class relies only on Sidekiq's server middleware protocol (`new`
# with the arguments given to chain.add, here none, then
# `call(job_instance, job_hash, queue) { ... }` around each job).
#
# Rperf::SidekiqMiddleware is the name rperf 0.6 gave it.

require "rperf"

module Rperf
  class Sidekiq
    # `queue` is the queue's name (Sidekiq passes a String). A nil class or
    # queue removes that label for the job (an outer one included).
    def call(_job_instance, job, queue)
      Rperf.profile(job: self.class.job_name(job), queue: queue) { yield }
    end

    # The job's class name: the wrapped class for an ActiveJob job, else
    # the class Sidekiq runs. A String as Sidekiq gives it (the job hash
    # went through JSON); anything else (a hash built by hand with a Class
    # in it) as its to_s.
    def self.job_name(job)
      return nil unless job.is_a?(Hash)

      name = job["wrapped"] || job["class"]
      name.nil? || name.is_a?(String) ? name : name.to_s
    end
  end

  SidekiqMiddleware = Sidekiq
end
