# frozen_string_literal: true

# Rperf::PprofApp — Go's net/http/pprof surface as a Rack app, so that
# `go tool pprof`, Parca and Grafana Alloy's pyroscope.scrape read a running
# Ruby process the way they read a Go one (docs/continuous-profiling.md):
#
#   GET /debug/pprof/                     an HTML index
#   GET /debug/pprof/profile?seconds=N    gzipped pprof of the next N seconds
#   GET /debug/pprof/flamegraph?seconds=N the HTML flame graph of those seconds
#   GET /debug/pprof/heap                 gzipped heap profile of the run now
#                                         (default sample type inuse_space)
#   GET /debug/pprof/allocs               the same, default alloc_space
#                                         (404 unless the run samples allocations)
#   GET /debug/pprof/heap?seconds=N       (and allocs) a delta profile of the
#                                         next N seconds, as Go's
#
# Each profile request opens its own Rperf::Window, so any number of
# scrapes may overlap and none of them clears what Rperf.snapshot(clear:
# true) users see. While profiling is off a request starts nothing and gets
# 503, unless the app was built with start: (an on-demand run that lasts
# as long as some request needs it, OnDemand below).
#
# It implements call(env) only and never loads the rack gem. Mount it at
# /debug/pprof (`map "/debug/pprof" { run Rperf::PprofApp.new }`) or
# anywhere PATH_INFO keeps the /debug/pprof prefix. Rperf.serve
# (rperf/serve.rb) runs the same app on a listener of its own.
#
# Context: call(env) runs on whichever thread the server gives it (a Rack
# server's request thread, or a "rperf-serve" thread of the listener), in
# the main Ractor (windows are main-Ractor only), any number at once. A
# profile request holds that thread for its N seconds, as Go's handler does.

require "rperf" unless defined?(Rperf::VERSION)

module Rperf
  class PprofApp
    PREFIX = "/debug/pprof"
    DEFAULT_SECONDS = 30      # Go's default for /debug/pprof/profile
    MAX_SECONDS = 3600
    DEFAULT_MAX_PROFILES = 8  # windows open at once, per app
    MAX_QUERY_BYTES = 1024
    MAX_TOKEN_BYTES = 4096
    # What an on-demand run (start:) may be given; it writes no output.
    START_KEYS = %i[frequency mode backend signal allow_signal ring_size max_label_sets defer inherit
                    allocations alloc_interval].freeze
    # The flame graph page's own policy (exporters/html.c), sent as a header
    # too: the page can fetch nothing.
    HTML_CSP = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:"
    # A run with aggregate: false keeps raw samples: no window, no snapshot.
    RAW_RUN = "profiling runs, but with aggregate: false: it keeps raw samples and has no profile to serve; " \
              "restart it with aggregate: true (the default: drop aggregate: false, RPERF_AGGREGATE=0 " \
              "or --no-aggregate)"

    attr_reader :max_seconds, :max_profiles

    # Rperf::Server's accepting thread opens a profile's window when the
    # request arrives if it carries this token (nil: none is needed).
    def __token
      @token
    end

    # token: a String every request must present as `Authorization: Bearer
    # TOKEN` (nil: none). start: nil (a request while profiling is off gets
    # 503), true or a Hash of Rperf.start options (such a request starts an
    # on-demand run). max_seconds: the largest `seconds`. max_profiles:
    # profile requests in progress at once; more get 503.
    def initialize(token: nil, start: nil, max_seconds: MAX_SECONDS, max_profiles: DEFAULT_MAX_PROFILES)
      @token_digest = token_digest(token)
      @token = token
      @start = self.class.start_options(start)
      unless max_seconds.is_a?(Integer) && max_seconds.between?(1, 86_400)
        raise ArgumentError, "max_seconds must be an Integer from 1 to 86400, got #{max_seconds.inspect}"
      end
      unless max_profiles.is_a?(Integer) && max_profiles.between?(1, 1024)
        raise ArgumentError, "max_profiles must be an Integer from 1 to 1024, got #{max_profiles.inspect}"
      end

      @max_seconds = max_seconds
      @max_profiles = max_profiles
      @lock = Mutex.new
      @profiles = 0
    end

    def call(env)
      return unauthorized unless authorized?(env)

      method = env["REQUEST_METHOD"]
      unless method == "GET" || method == "HEAD"
        return text(405, "rperf: #{method} not allowed; use GET", "allow" => "GET, HEAD")
      end

      route(env)
    rescue StandardError => e
      text(500, "rperf: #{e.class}: #{e.message}")
    end

    # start: as given to new or Rperf.serve -> the options of an on-demand
    # run (a Hash), or nil. ArgumentError names what is wrong.
    def self.start_options(start)
      return nil if start.nil? || start == false

      start = {} if start == true
      unless start.is_a?(Hash)
        raise ArgumentError, "start: must be nil, true or a Hash of Rperf.start options, got #{start.inspect}"
      end
      unknown = start.keys - START_KEYS
      unless unknown.empty?
        raise ArgumentError, "start: does not take #{unknown.map(&:inspect).join(', ')} " \
                             "(an on-demand run writes no output); accepted: #{START_KEYS.map(&:inspect).join(', ')}"
      end
      OnDemand.validate(start)
      # forks during an on-demand run do not inherit it: the run stops when
      # the last request ends, and a child would outlive it
      { inherit: false }.merge(start).freeze
    end

    private

    def route(env)
      path, base = relative_path(env)
      case path
      when "", "/" then index(base)
      when "/profile" then profile(env, :pprof)
      when "/flamegraph" then profile(env, :html)
      when "/heap" then memory(env, base, :inuse_space)
      when "/allocs" then memory(env, base, :alloc_space)
      else text(404, "rperf: not found: #{one_line(path, 80)}")
      end
    end

    # [path below the mount point, URL prefix of the routes]. Mounted at
    # /debug/pprof (SCRIPT_NAME holds it) or at the root (PATH_INFO does).
    def relative_path(env)
      script = env["SCRIPT_NAME"].to_s
      path = env["PATH_INFO"].to_s
      if path == PREFIX || path.start_with?("#{PREFIX}/")
        [path.delete_prefix(PREFIX), script + PREFIX]
      else
        [path, script]
      end
    end

    # ---- /profile and /flamegraph -----------------------------------------

    def profile(env, format)
      seconds = seconds_param(env["QUERY_STRING"].to_s)
      return seconds if seconds.is_a?(Array) # a 400 response
      unless take_slot
        return text(503, "rperf: busy: #{@max_profiles} profile requests in progress (max_profiles); try again later",
                    "retry-after" => "5")
      end

      begin
        data = window_data(env, seconds, %i[inuse_space alloc_space].include?(format), format)
      ensure
        give_slot
      end
      return data if data.is_a?(Array) # 503, the client left, or sent already

      case format
      when :pprof then pprof_response(data)
      when :html then html_response(data)
      else memory_response(data, format)
      end
    end

    # The result Hash of the next `seconds` (with its allocations when
    # `heap`), or a response when there is none (profiling off, the run
    # samples no allocations, the server stopping, the client gone, or the
    # listener's send answered the request already: SENT).
    def window_data(env, seconds, heap, format)
      demand = @start && OnDemand.acquire(@start)
      begin
        window = open_window(heap, env)
        return window if window.is_a?(Array)

        seconds = window.__remaining(seconds)

        outcome = :done
        data = nil
        closed = false
        begin
          # an on-demand run stops before its request is answered
          outcome = demand ? nil : send_window(env, window, seconds, format)
          if outcome == :sent || outcome.is_a?(Array)
            closed = true
            data = window.__close_sent(outcome.is_a?(Array) ? outcome : nil)
          end
          outcome = wait(env, seconds) if outcome.nil?
        ensure
          data = window.close unless closed # always: an open window costs every clearing snapshot
        end
        return SENT if outcome == :sent
        return text(503, "rperf: server stopping") if outcome == :stopping
        return text(499, "rperf: client closed the connection") if outcome == :gone

        data
      ensure
        OnDemand.release if demand
      end
    end

    # The listener's send (Rperf::Server, "rperf.send"): a pprof window
    # ended and written to the client by C without waiting for the GVL.
    # nil when it is not used (not the listener, not a pprof, HEAD, a
    # window with children, an on-demand run): the caller waits. Otherwise how the wait
    # ended: :sent (answered), :done/:gone/:stopping (the window is the
    # caller's to close), or the window's parts (closed by the send; the
    # caller answers from them).
    def send_window(env, window, seconds, format)
      sender = env["rperf.send"]
      return nil unless sender && format != :html && env["REQUEST_METHOD"] == "GET"

      opts = format == :pprof ? nil : { sample_type: format }.freeze
      sender.call(window, seconds, pprof_headers(format == :pprof ? "profile" : memory_filename(format)), opts)
    end

    # The listener's accepting thread may have opened a time window when
    # the request arrived ("rperf.premark"): the profile's span starts then.
    def open_window(heap, env)
      require "rperf/window" # here, not at load: rperf.rb may load this file while it loads
      mark = heap ? nil : env.delete("rperf.premark")
      mark ? Window.__adopt(mark) : Window.open(allocations: heap)
    rescue ArgumentError # a heap window of a run that samples no allocations
      no_memory_profile(@start ? " (serve with start: { allocations: true })" : "")
    rescue RuntimeError => e
      unavailable(e, heap)
    end

    # A 503 for a RuntimeError `e` of a window or a snapshot: nothing runs
    # (and this request started nothing), or the run keeps raw samples
    # (aggregate: false), which gives no window nor snapshot; said with
    # what to do. `memory`: the request wanted allocations.
    def unavailable(e, memory)
      run = Rperf.__current_run
      return not_running(memory) if run.nil?
      return text(503, "rperf: #{RAW_RUN}") unless run.aggregate

      text(503, "rperf: profiling is not available: #{one_line(e.message, 200)}")
    end

    # Nothing runs: a 503 that says how to start a run this route serves.
    def not_running(memory)
      unless memory
        hint = @start ? "" : ", or serve with start: to let profile requests start a run"
        return text(503, "rperf: profiling is not running: start it with Rperf.start (or RPERF_ENABLED=1)#{hint}")
      end

      hint = if @start&.fetch(:allocations, false) then "; with ?seconds=N a request starts one"
             elsif @start then "; with ?seconds=N a request starts one if served with start: { allocations: true }"
             else ", or serve with start: { allocations: true } and ask with ?seconds=N"
             end
      text(503, "rperf: profiling is not running: start a run that samples allocations with " \
                "Rperf.start(mode: :alloc), or allocations: true beside mode: :cpu or :wall#{hint}")
    end

    # Wait `seconds`. The listener passes "rperf.wait", which also returns
    # early (:gone, :stopping) when the client disconnects or the listener
    # stops; a Rack server has no such signal, so the thread sleeps.
    def wait(env, seconds)
      waiter = env["rperf.wait"]
      return waiter.call(seconds) if waiter

      sleep(seconds)
      :done
    end

    def profiles_in_progress
      @lock.synchronize { @profiles }
    end

    def take_slot
      @lock.synchronize do
        return false if @profiles >= @max_profiles

        @profiles += 1
      end
      true
    end

    def give_slot
      @lock.synchronize { @profiles -= 1 }
    end

    # What Rperf::Server#handle leaves unanswered: the send wrote it.
    SENT = [:sent, {}.freeze, [].freeze].freeze

    def pprof_headers(filename)
      { "content-type" => "application/octet-stream",
        "content-disposition" => %(attachment; filename="#{filename}"),
        "x-content-type-options" => "nosniff", "cache-control" => "no-store" }
    end

    def pprof_response(data)
      body = Rperf.gzip(Rperf._encode("pprof", data, nil))
      [200, pprof_headers("profile").merge("content-length" => body.bytesize.to_s), [body]]
    end

    def html_response(data)
      body = Rperf._encode("html", data, nil)
      [200, { "content-type" => "text/html; charset=utf-8", "content-security-policy" => HTML_CSP,
              "x-content-type-options" => "nosniff", "cache-control" => "no-store",
              "content-length" => body.bytesize.to_s }, [body]]
    end

    # seconds=N -> N (default DEFAULT_SECONDS), or a 400 response.
    def seconds_param(query)
      return bad("query string longer than #{MAX_QUERY_BYTES} bytes") if query.bytesize > MAX_QUERY_BYTES

      values = query.split("&").filter_map do |pair|
        key, value = pair.split("=", 2)
        unescape(value.to_s) if unescape(key.to_s) == "seconds"
      end
      return bad("seconds given #{values.size} times") if values.size > 1
      return DEFAULT_SECONDS if values.empty?

      value = values.first
      n = value.match?(/\A\d{1,6}\z/) ? value.to_i : 0
      return n if n.between?(1, @max_seconds)

      bad("seconds must be an integer from 1 to #{@max_seconds}, got #{one_line(value, 32).inspect}")
    end

    # Percent-decoding as bytes (a query may hold anything).
    def unescape(s)
      s.b.tr("+", " ").gsub(/%(\h\h)/n) { Regexp.last_match(1).hex.chr }
    end

    # ---- /heap and /allocs ---------------------------------------------------

    # The run's memory profile. Without `seconds`, as Go's handlers give
    # it: allocations since the run's start (or its last clearing
    # snapshot), objects in use now; a snapshot that clears nothing. With
    # `seconds=N`, Go's delta profile: the allocations of the next N
    # seconds and the change of the objects in use by stack (a window,
    # as /profile's). The two routes differ only in the default sample type.
    def memory(env, _base, type)
      query = env["QUERY_STRING"].to_s
      return bad("query string longer than #{MAX_QUERY_BYTES} bytes") if query.bytesize > MAX_QUERY_BYTES
      return profile(env, type) if query.split("&").any? { |pair| unescape(pair.split("=", 2).first.to_s) == "seconds" }

      data = Rperf.snapshot
      return not_running(true) unless data
      return no_memory_profile unless data[:allocations]

      memory_response(data, type)
    rescue RuntimeError => e # aggregate: false
      unavailable(e, true)
    end

    def no_memory_profile(hint = "")
      text(404, "rperf: no memory profile: the run does not sample allocations " \
                "(Rperf.start(mode: :alloc) or allocations: true)#{hint}")
    end

    def memory_filename(type)
      type == :inuse_space ? "heap" : "allocs"
    end

    def memory_response(data, type)
      body = Rperf.gzip(Rperf::PProf.encode(data, sample_type: type))
      [200, pprof_headers(memory_filename(type)).merge("content-length" => body.bytesize.to_s), [body]]
    end

    # ---- index -------------------------------------------------------------

    def index(base)
      b = html_escape(base)
      state = Rperf.running? ? "profiling is running" : @start ? "profiling starts on request" : "profiling is off"
      body = <<~HTML
        <!DOCTYPE html>
        <html><head><meta charset="utf-8"><title>rperf /debug/pprof/</title></head>
        <body>
        <h1>rperf #{html_escape(Rperf::VERSION)}: /debug/pprof/</h1>
        <p>pid #{Process.pid}, #{state};
        #{profiles_in_progress} of at most #{@max_profiles} profile requests in progress.</p>
        <ul>
        <li><a href="#{b}/profile?seconds=30">profile?seconds=30</a>: pprof (gzipped) of the next
        30 seconds, cpu or wall as the run samples (seconds 1..#{@max_seconds}, default 30)</li>
        <li><a href="#{b}/flamegraph?seconds=30">flamegraph?seconds=30</a>: the same window as an HTML flame graph</li>
        <li><a href="#{b}/heap">heap</a>, <a href="#{b}/allocs">allocs</a>: pprof (gzipped) of the
        run's allocations so far and the objects in use now, when it samples allocations
        (Rperf.start(mode: :alloc) or allocations: true)</li>
        </ul>
        <p><code>go tool pprof http://HOST:PORT#{b}/profile?seconds=30</code></p>
        </body></html>
      HTML
      [200, { "content-type" => "text/html; charset=utf-8", "cache-control" => "no-store",
              "content-length" => body.bytesize.to_s }, [body]]
    end

    # ---- token -------------------------------------------------------------

    def token_digest(token)
      return nil if token.nil?
      unless token.is_a?(String) && !token.empty? && token.bytesize <= MAX_TOKEN_BYTES &&
             !token.match?(/[ \x00-\x1f\x7f]/)
        raise ArgumentError, "token must be nil or a non-empty String without spaces or control characters " \
                             "(at most #{MAX_TOKEN_BYTES} bytes)"
      end
      require "digest/sha2"
      Digest::SHA256.digest(token)
    end

    # The digests of both tokens are compared byte by byte without an early
    # exit: the time taken says nothing about the token, its length included.
    def authorized?(env)
      return true unless @token_digest

      given = env["HTTP_AUTHORIZATION"].to_s[/\ABearer +(\S{1,#{MAX_TOKEN_BYTES}})\s*\z/i, 1]
      return false unless given

      digest = Digest::SHA256.digest(given)
      diff = 0
      digest.bytes.zip(@token_digest.bytes) { |a, b| diff |= a ^ b }
      diff.zero?
    end

    def unauthorized
      text(401, "rperf: unauthorized: send Authorization: Bearer <token>",
           "www-authenticate" => 'Bearer realm="rperf"')
    end

    # ---- small helpers -----------------------------------------------------

    def bad(message)
      text(400, "rperf: #{message}")
    end

    # A one-line text/plain response. X-Go-Pprof is what Go's handlers send
    # with an error: `go tool pprof` then prints the line to its user.
    def text(status, line, headers = {})
      body = "#{one_line(line, 400)}\n"
      [status, { "content-type" => "text/plain; charset=utf-8", "cache-control" => "no-store",
                 "x-content-type-options" => "nosniff", "x-go-pprof" => "1",
                 "content-length" => body.bytesize.to_s }.merge(headers),
       [body]]
    end

    # `s` as valid UTF-8 on one line, cut at `max` characters.
    def one_line(s, max)
      s = s.to_s.dup.force_encoding(Encoding::UTF_8).scrub("?").gsub(/[[:cntrl:]]/, "?")
      s.length > max ? "#{s[0, max]}..." : s
    end

    def html_escape(s)
      s.to_s.gsub(/[&<>"']/, "&" => "&amp;", "<" => "&lt;", ">" => "&gt;", '"' => "&quot;", "'" => "&#39;")
    end

    # On-demand runs (start:): the first profile request while profiling is
    # off starts a run with the app's options; the run stops when the last
    # request that needed it ends. One per process (the profiler is), shared
    # by every app and listener. A run somebody else started, or started
    # meanwhile, is never stopped here.
    module OnDemand
      LOCK = Mutex.new
      @users = 0     # requests using the run started here
      @run = nil     # that run (Rperf's run record, compared by identity)

      class << self
        # Before a window opens: true when this request counts as a user of
        # an on-demand run (release afterwards), false when it is someone
        # else's run.
        def acquire(opts)
          LOCK.synchronize do
            if Rperf.running?
              return false unless ours?

              @users += 1
              return true
            end
            Rperf.start(**opts)
            @run = current_run
            @users = 1
            true
          end
        end

        def release
          LOCK.synchronize do
            @users -= 1 if @users.positive?
            next unless @users.zero?

            begin
              Rperf.stop if ours?
            ensure
              @run = nil
            end
          end
        end

        # Rperf.start's checks that need no start: mode, frequency, backend
        # and signal, defer, inherit (ring_size and max_label_sets are
        # checked by the first start).
        def validate(opts)
          mode = opts.fetch(:mode, :cpu)
          raise ArgumentError, "start: mode must be :cpu or :wall, got #{mode.inspect}" unless %i[cpu wall].include?(mode)

          Rperf.__check_timing_options(**opts.slice(:frequency, :backend, :signal, :allow_signal))
          %i[defer allocations].each do |key|
            next if [true, false].include?(opts.fetch(key, false))

            raise ArgumentError, "start: #{key} must be true or false, got #{opts[key].inspect}"
          end
          interval = opts.fetch(:alloc_interval, Rperf::DEFAULT_ALLOC_INTERVAL)
          unless interval.is_a?(Integer) && interval.between?(1, Rperf::MAX_ALLOC_INTERVAL)
            raise ArgumentError,
                  "start: alloc_interval must be an Integer between 1 and #{Rperf::MAX_ALLOC_INTERVAL}, got #{interval.inspect}"
          end
          return if Rperf::INHERIT_VALUES.include?(opts.fetch(:inherit, false))

          raise ArgumentError, "start: inherit must be :fork, true or false, got #{opts[:inherit].inspect}"
        end

        # In a fork child: the parent's requests are not the child's.
        def __after_fork
          @users = 0
          @run = nil
        end

        private

        def ours?
          !@run.nil? && Rperf.running? && current_run.equal?(@run)
        end

        def current_run
          Rperf.__current_run
        end
      end
    end
  end
end
