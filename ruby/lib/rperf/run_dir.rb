# frozen_string_literal: true

require "securerandom"
require "tmpdir"

module Rperf
  # The private directory of a run whose processes write their profiles
  # for one of them to merge: the rperf command's run, and a run whose
  # forked children inherit it (ruby/lib/rperf/inherit.rb). Named
  # rperf-run-<pid of the process that merges>-<16 hex digits> in the temp
  # directory, mode 0700 whatever the umask; the rperf command removes
  # those whose process is gone. Pure Ruby: the command makes one before it
  # loads the extension.
  module RunDir
    NAME = /\Arperf-run-(\d+)-\h{16}\z/

    def self.make(tmp = Dir.tmpdir)
      begin
        path = File.join(tmp, "rperf-run-#{Process.pid}-#{SecureRandom.hex(8)}")
        Dir.mkdir(path, 0o700)
      rescue Errno::EEXIST
        retry
      end
      File.chmod(0o700, path)
      path
    end
  end
end
