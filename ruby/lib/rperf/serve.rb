# frozen_string_literal: true

# Rperf.serve — a listener of its own for the pprof routes of
# Rperf::PprofApp (rperf/pprof_app.rb), for processes without Rack (Sidekiq,
# job runners) and for the master of a forking server, whose snapshots hold
# its running workers (docs/continuous-profiling.md):
#
#   server = Rperf.serve(port: 6060)   # 127.0.0.1 unless host: is given
#   server.port                        # port: 0 picks a free one
#   server.stop                        # idempotent; done at exit too
#
# or from the environment: RPERF_SERVE=PORT or HOST:PORT (with
# RPERF_SERVE_TOKEN and RPERF_SERVE_START=cpu|wall), read by
# Server.__serve_from_env when rperf.rb loads this file.
#
# Plain Ruby on the socket library: HTTP/1.1 GET, one request per
# connection (`connection: close`), only /debug/pprof and below (404
# elsewhere).
#
# Context: Rperf.serve and Server#stop run on any thread of the main
# Ractor. Connections are accepted by a thread in C (ruby/serve_accept.c),
# which needs no GVL and has a profile request's window opened the moment
# the request arrives (a postponed job on whichever thread holds the
# GVL). The Ruby threads, all named "rperf-serve": one takes what the C
# thread accepted and hands each connection to the handler threads, one
# per connection in progress (at most max_connections connections at once;
# more are answered 503 at once): one handler waits from the start, more
# are made when connections overlap and end after HANDLER_IDLE seconds
# without one. Each read and write is under a deadline and woken by stop,
# so that no client, slow or silent, ever holds an application thread, the
# listener or another client's request. A pprof window's end and answer
# are left to C too (send_window): a scrape of N seconds answers N
# seconds after its request arrived, however long the busy threads keep
# these threads from the GVL (as long as the accepting thread and the
# request's handler each get it once within the N seconds). Without the
# C thread (it could not be made) the Ruby thread accepts, handles the
# connection itself and a new thread takes over accepting. A fork child
# closes its inherited copies of the sockets (ServeForkHook): the root's
# listener stays the only one on the port. Every listener is stopped at
# exit.

require "rperf" unless defined?(Rperf::VERSION)
require "socket"
require "ipaddr"
require "rperf/pprof_app"

module Rperf
  class Server
    THREAD_NAME = "rperf-serve"
    DEFAULT_READ_TIMEOUT = 10
    DEFAULT_WRITE_TIMEOUT = 30
    DEFAULT_MAX_CONNECTIONS = 16
    MAX_HEAD_BYTES = 8192       # request line and headers
    MAX_HEADERS = 64
    MAX_DISCARD_BYTES = 65_536  # what a client may send while its profile is taken
    STOP_WAIT = 5               # seconds stop waits for its threads
    HANDLER_IDLE = 60           # seconds a handler thread beyond the first waits for a connection
    SEND_GRACE = 0.02           # seconds a window's end is left to the send's job
    QUIET_ACCEPT_ERRORS = [Errno::EMFILE, Errno::ENFILE, Errno::ENOBUFS, Errno::ENOMEM, Errno::ECONNABORTED,
                           Errno::EPROTO].freeze
    REASONS = { 200 => "OK", 400 => "Bad Request", 401 => "Unauthorized", 404 => "Not Found",
                405 => "Method Not Allowed", 408 => "Request Timeout", 431 => "Request Header Fields Too Large",
                499 => "Client Closed Request", 500 => "Internal Server Error",
                503 => "Service Unavailable" }.freeze

    REGISTRY = Mutex.new
    @all = []
    @at_exit = false
    @env_served = false

    class << self
      # The listeners of this process that are not stopped.
      def all
        REGISTRY.synchronize { @all.dup }
      end

      def stop_all
        all.each(&:stop)
      end

      # Rperf.serve's default token: RPERF_SERVE_TOKEN when set and not empty.
      def env_token
        t = ENV["RPERF_SERVE_TOKEN"]
        t.nil? || t.empty? ? nil : t
      end

      # RPERF_SERVE=PORT | HOST:PORT | [IPv6]:PORT starts a listener (once per
      # process); RPERF_SERVE_TOKEN is its token, RPERF_SERVE_START=cpu|wall
      # its on-demand run (with RPERF_FREQUENCY). A malformed value raises
      # ArgumentError, as the other RPERF_* variables do; a port that cannot
      # be bound (a spawned Ruby program inheriting the variable, say) is
      # reported in one line and the program goes on without a listener.
      def __serve_from_env(env = ENV)
        spec = env["RPERF_SERVE"].to_s
        return nil if spec.empty? || @env_served

        @env_served = true
        host, port = parse_spec(spec)
        Rperf.serve(host: host, port: port, start: env_start(env))
      rescue SystemCallError, SocketError => e
        warn "rperf: RPERF_SERVE=#{spec}: not serving: #{e.message}"
        nil
      end

      def __register(server)
        REGISTRY.synchronize do
          @all << server
          unless @at_exit
            @at_exit = true
            at_exit { stop_all }
          end
        end
      end

      def __unregister(server)
        REGISTRY.synchronize { @all.delete(server) }
      end

      # In a fork child, before anything else runs there: the listener
      # threads did not come along; the sockets did. Closing the child's
      # copies leaves the port to the parent alone (and free once the parent
      # stops, whatever the children do). No lock: a lock held at the fork
      # by a thread that is gone would be abandoned, not released.
      def __after_fork_child
        servers = @all
        @all = []
        servers.each(&:__abandon)
        PprofApp::OnDemand.__after_fork
      end

      private

      def parse_spec(spec)
        m = spec.match(/\A(?:(?:\[(?<v6>[0-9A-Fa-f:.]+)\]|(?<host>[^:\[\]\s]+)):)?(?<port>\d{1,5})\z/)
        port = m && m[:port].to_i
        unless port&.between?(0, 65_535)
          raise ArgumentError, "RPERF_SERVE must be PORT, HOST:PORT or [IPV6]:PORT (port 0..65535), got #{spec.inspect}"
        end

        [m[:v6] || m[:host] || "127.0.0.1", port]
      end

      def env_start(env)
        case (mode = env["RPERF_SERVE_START"].to_s)
        when "", "0", "false" then nil
        when "cpu", "wall"
          freq = env["RPERF_FREQUENCY"]
          opts = { mode: mode.to_sym }
          opts[:frequency] = Integer(freq, exception: false) || 0 if freq && !freq.empty?
          opts
        else raise ArgumentError, "RPERF_SERVE_START must be 'cpu' or 'wall', got #{mode.inspect}"
        end
      end
    end

    attr_reader :host, :port, :app, :read_timeout, :write_timeout, :max_connections

    # Binds at once (Errno::EADDRINUSE and the like come from here) and
    # starts the accepting thread. Use Rperf.serve.
    def initialize(port:, host: "127.0.0.1", app: PprofApp.new, read_timeout: DEFAULT_READ_TIMEOUT,
                   write_timeout: DEFAULT_WRITE_TIMEOUT, max_connections: DEFAULT_MAX_CONNECTIONS)
      check_options(port, host, read_timeout, write_timeout, max_connections)
      @app = app
      @read_timeout = read_timeout
      @write_timeout = write_timeout
      @max_connections = max_connections
      @lock = Mutex.new
      @conns = {} # handler Thread => its socket
      @work = Thread::Queue.new # [socket, mark] for the handler threads
      @workers = [] # the handler threads; the first one stays
      @handling = 0 # connections given to the handler threads and not done
      @handler_idle = HANDLER_IDLE
      @stopped = false
      @server = TCPServer.new(host, port)
      @host = host
      @port = @server.local_address.ip_port
      # stop closes the write end: the read end then stays readable, which
      # wakes every IO.select of every listener thread at once
      @wake_r, @wake_w = IO.pipe
      start_acceptor
      # one handler waiting from the start: the first scrape makes no thread
      @workers << named_thread { work_loop(true) } if @acceptor
      @accept_thread = named_thread { accept_loop }
      self.class.__register(self)
    end

    def url
      h = @host.include?(":") ? "[#{@host}]" : @host
      "http://#{h}:#{@port}#{PprofApp::PREFIX}/"
    end

    def stopped?
      @stopped
    end

    # Bound to a loopback address (127.0.0.0/8, ::1): unreachable from
    # other machines.
    def loopback?
      addr = @server.local_address
      addr.ipv4_loopback? || addr.ipv6_loopback?
    end

    # Stops accepting, answers profiles in progress with 503 (their windows
    # are closed), closes every connection and waits for the listener's
    # threads (at most STOP_WAIT seconds). Returns true, or false when it
    # was stopped already.
    def stop
      first = @lock.synchronize { @stopped ? false : (@stopped = true) }
      return false unless first

      @wake_w.close
      deadline = now + STOP_WAIT
      join(@lock.synchronize { @accept_thread }, deadline)
      stop_acceptor
      @server.close
      stop_workers(deadline)
      @lock.synchronize { @conns.keys }.each { |t| join(t, deadline) }
      @wake_r.close
      self.class.__unregister(self)
      true
    end

    def inspect
      "#<#{self.class} #{url}#{@stopped ? ' stopped' : ''}>"
    end

    # In a fork child (__after_fork_child): drop this process's copies of
    # the sockets; the threads that used them do not exist here.
    def __abandon
      @stopped = true
      stop_acceptor
      until (item = @work.pop(timeout: 0)).nil?
        item[0].close
      end
      [@server, @wake_r, @wake_w, *@conns.values].each do |io|
        io.close unless io.closed?
      rescue IOError, SystemCallError
        nil
      end
      @conns = {}
    end

    private

    # The handler threads end (their connections in progress are woken by
    # stop's wake pipe); connections still queued for them are closed.
    def stop_workers(deadline)
      workers = @lock.synchronize { @workers.dup }
      @work.close
      until (item = @work.pop(timeout: 0)).nil?
        sock, mark = item
        reject(sock, mark)
      end
      workers.each { |t| join(t, deadline) }
    end

    # The C accepting thread stopped (joined; none in a fork child) and
    # what it queued closed.
    def stop_acceptor
      return unless @acceptor

      Rperf._c_acceptor_stop(@acceptor)
      [@accept_r, @accept_w].each { |io| io.close unless io.closed? }
    end

    def check_options(port, host, read_timeout, write_timeout, max_connections)
      unless port.is_a?(Integer) && port.between?(0, 65_535)
        raise ArgumentError, "port must be an Integer from 0 to 65535, got #{port.inspect}"
      end
      unless host.is_a?(String) && !host.empty?
        raise ArgumentError, "host must be a non-empty String, got #{host.inspect}"
      end

      { read_timeout: read_timeout, write_timeout: write_timeout }.each do |name, v|
        next if v.is_a?(Numeric) && v.positive? && v <= 3600

        raise ArgumentError, "#{name} must be a positive number of seconds (at most 3600), got #{v.inspect}"
      end
      return if max_connections.is_a?(Integer) && max_connections.between?(1, 1024)

      raise ArgumentError, "max_connections must be an Integer from 1 to 1024, got #{max_connections.inspect}"
    end

    def named_thread(*args)
      t = Thread.new(*args) do |*a|
        Thread.current.name = THREAD_NAME # the thread may run before its creator names it
        yield(*a)
      end
      t.name = THREAD_NAME
      t.report_on_exception = false
      t
    end

    def now
      Process.clock_gettime(Process::CLOCK_MONOTONIC)
    end

    def join(thread, deadline)
      return if thread.equal?(Thread.current)

      thread.join([deadline - now, 0].max)
    end

    # ---- accepting -----------------------------------------------------------

    # Connections are accepted by a thread in C (ruby/serve_accept.c): it
    # needs no GVL, and opens a profile request's window the moment it
    # arrives. The Ruby accepting thread is woken through a pipe and takes
    # them (each with its window's mark, or nil). Without that thread (it
    # could not be made) this thread accepts.
    def start_acceptor
      @accept_r, @accept_w = IO.pipe
      windows = @app.is_a?(PprofApp)
      @acceptor = Rperf._c_acceptor(@server.fileno, @accept_w.fileno, windows, windows ? @app.__token : nil)
      return if @acceptor

      [@accept_r, @accept_w].each(&:close)
      @accept_r = @accept_w = nil
    end

    def accept_loop
      until @stopped
        ready = IO.select([@accept_r || @server, @wake_r])
        next unless ready && !@stopped
        next unless ready[0].include?(@accept_r || @server)

        if @acceptor
          accepted.each { |sock, mark| dispatch(sock, mark) }
          next
        end
        sock = @server.accept_nonblock(exception: false)
        next if sock == :wait_readable
        return handle(sock) if take_over(sock)

        reject(sock)
      end
    rescue IOError, SystemCallError => e
      return if @stopped

      # out of descriptors, a connection reset before it was accepted: wait
      # a moment (or for stop) and go on; anything else is said once
      warn "rperf: #{inspect}: accept failed: #{e.message}" unless QUIET_ACCEPT_ERRORS.any? { |c| e.is_a?(c) }
      begin
        IO.select([@wake_r], nil, nil, 0.1)
      rescue IOError
        return
      end
      retry
    end

    # [[socket, mark or nil], ...]: what the C thread accepted.
    def accepted
      @accept_r.read_nonblock(4096, exception: false) # the wake-ups so far
      Rperf._c_acceptor_take(@acceptor).map { |fd, mark| [Socket.for_fd(fd), mark] }
    end

    # A connection for the handler threads: each connection in progress has
    # a thread of its own, so overlapping scrapes are answered side by side
    # (a thread waiting in Queue#pop that `<<` woke still counts as
    # waiting: only the connections given out and not done tell how many
    # threads are needed). Threads are kept between connections: a new
    # thread's first turn waits a time slice of every busy thread, and
    # until it has had it Ruby delivers postponed jobs triggered from other
    # threads (the send's) to that new thread. At most max_connections at
    # once; more are answered 503.
    def dispatch(sock, mark)
      grow = @lock.synchronize do
        next :full if @stopped || @handling >= @max_connections

        @work << [sock, mark]
        @handling += 1
        @handling > @workers.size
      end
      return reject(sock, mark) if grow == :full

      @lock.synchronize { @workers << named_thread { work_loop(false) } } if grow
    rescue ThreadError # no thread: the ones there take it in turn
      nil
    end

    # A handler thread. The first one waits for connections as long as the
    # listener runs; one made when connections overlapped ends once it has
    # waited @handler_idle seconds for one, unless every other thread is
    # needed (an idle listener keeps one handler).
    def work_loop(first)
      while (item = first ? @work.pop : @work.pop(timeout: @handler_idle)) || !(@work.closed? || leave_idle)
        handle(*item, dispatched: true) if item
      end
    end

    # True when this idle handler thread is not needed: the others are
    # enough for the connections given out (one arrived meanwhile has one).
    def leave_idle
      @lock.synchronize do
        next false if @workers.size - 1 < @handling

        @workers.delete(Thread.current)
        true
      end
    end

    # This thread becomes the handler of `sock`, and a new thread accepts
    # from now on: true. false (stopping, max_connections reached, no
    # thread could be made): this thread goes on accepting.
    def take_over(sock)
      @lock.synchronize do
        return false if @stopped || @conns.size >= @max_connections

        @accept_thread = named_thread { accept_loop }
        @conns[Thread.current] = sock
      end
      true
    rescue ThreadError
      false
    end

    # Over max_connections: answered on the accepting thread without
    # waiting for anything (one non-blocking write), then closed.
    def reject(sock, mark = nil)
      Rperf._c_window_discard(mark) if mark
      body = "rperf: too many connections (#{@max_connections})\n"
      sock.read_nonblock(MAX_HEAD_BYTES, exception: false) # what came already: closing on unread data resets
      sock.write_nonblock("HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n" \
                          "x-go-pprof: 1\r\n" \
                          "content-length: #{body.bytesize}\r\nretry-after: 1\r\nconnection: close\r\n\r\n#{body}",
                          exception: false)
      sock.shutdown(Socket::SHUT_WR)
    rescue IOError, SystemCallError
      nil
    ensure
      sock.close unless sock.closed?
    end

    # ---- one connection ------------------------------------------------------

    # mark: the window the C accepting thread opened when the request
    # arrived (a profile request), adopted by PprofApp ("rperf.premark");
    # discarded at the end if nobody did.
    def handle(sock, mark = nil, dispatched: false)
      # the listener's own work (encoding a window) is visible in the profile
      # under a label of its own: `-tagignore rperf=serve` leaves it out
      Rperf.label(rperf: "serve") if Rperf.running?
      @lock.synchronize { @conns[Thread.current] = sock }
      head = read_head(sock)
      case head
      when :timeout then respond(sock, *error(408, "request not received within #{@read_timeout} s"))
      when :too_large then respond(sock, *error(431, "request head larger than #{MAX_HEAD_BYTES} bytes"))
      when String
        env = parse(head, sock)
        env["rperf.premark"] = mark if mark && env.is_a?(Hash)
        status, headers, body = env.is_a?(Hash) ? call_app(env) : env
        # 499: the client left while its profile was taken; nobody to answer
        # (:sent: the send answered already)
        head_only = env.is_a?(Hash) && env["REQUEST_METHOD"] == "HEAD"
        respond(sock, status, headers, body, head_only: head_only) unless status == 499 || status == :sent
      end
    rescue IOError, SystemCallError
      nil # the client went away or stop closed the socket
    rescue StandardError => e
      warn "rperf: #{inspect}: #{e.class}: #{e.message}"
    ensure
      Rperf._c_window_discard(mark) if mark # closed already when a profile adopted it
      begin
        sock.close unless sock.closed?
      rescue IOError, SystemCallError
        nil
      end
      @lock.synchronize do
        @conns.delete(Thread.current)
        @handling -= 1 if dispatched
      end
    end

    def call_app(env)
      path = env["PATH_INFO"]
      unless path == PprofApp::PREFIX || path.start_with?("#{PprofApp::PREFIX}/")
        return error(404, "not found: only #{PprofApp::PREFIX}/ is served")
      end

      @app.call(env)
    end

    # The request line and headers, or :timeout, :too_large, :eof, :stopping.
    def read_head(sock)
      deadline = now + @read_timeout
      buf = String.new(encoding: Encoding::BINARY)
      loop do
        return :too_large if buf.bytesize > MAX_HEAD_BYTES
        return buf if buf.match?(/\r?\n\r?\n/n)

        case (chunk = read_some(sock, deadline))
        when Symbol then return chunk
        else buf << chunk
        end
      end
    end

    # Bytes from the client, or :timeout (deadline passed), :eof, :stopping.
    # Reads first and waits only when nothing is there: every wait gives up
    # the GVL, and getting it back may take a time slice of a busy thread.
    def read_some(sock, deadline)
      loop do
        return :stopping if @stopped

        chunk = sock.read_nonblock(4096, exception: false)
        return :eof if chunk.nil?
        return chunk unless chunk == :wait_readable

        remaining = deadline - now
        return :timeout if remaining <= 0

        ready = IO.select([sock, @wake_r], nil, nil, remaining)
        return :stopping if ready && ready[0].include?(@wake_r)
      end
    end

    # The profile waits here (PprofApp's "rperf.wait"): `seconds`, or less
    # when the client disconnects (:gone) or the listener stops (:stopping).
    # Bytes a client sends meanwhile are read and dropped, up to a bound.
    def wait_client(sock, seconds)
      deadline = now + seconds
      dropped = 0
      loop do
        case (chunk = read_some(sock, deadline))
        when :timeout then return :done
        when :eof then return :gone
        when :stopping then return :stopping
        else
          dropped += chunk.bytesize
          return :gone if dropped > MAX_DISCARD_BYTES
        end
      end
    rescue IOError, SystemCallError
      @stopped ? :stopping : :gone
    end

    # A Rack env for the request in `head`, or an error response.
    def parse(head, sock)
      lines = head.split(/\r?\n/n)
      m = lines.shift.to_s.match(%r{\A([A-Z]{1,16}) (\S{1,#{MAX_HEAD_BYTES}}) HTTP/1\.([01])\z}n)
      return error(400, "malformed request line") unless m

      target = m[2].sub(%r{\Ahttps?://[^/?]*}in, "") # absolute-form: keep path and query
      target = "/#{target}" unless target.start_with?("/")
      path, query = target.split("?", 2)
      headers = lines.take_while { |l| !l.empty? }
      return error(431, "more than #{MAX_HEADERS} header lines") if headers.size > MAX_HEADERS

      env = base_env(m[1], path, query.to_s, "HTTP/1.#{m[3]}", sock)
      headers.each do |line|
        name, value = line.split(":", 2)
        return error(400, "malformed header line") unless value && name.match?(/\A[!\#$%&'*+.^_`|~0-9A-Za-z-]+\z/n)

        env["HTTP_#{name.upcase.tr('-', '_')}"] = utf8(value.strip)
      end
      env
    end

    def base_env(method, path, query, version, sock)
      { "REQUEST_METHOD" => method, "SCRIPT_NAME" => "", "PATH_INFO" => utf8(path),
        "QUERY_STRING" => utf8(query), "SERVER_NAME" => @host,
        "SERVER_PORT" => @port.to_s, "SERVER_PROTOCOL" => version, "REMOTE_ADDR" => remote_addr(sock),
        "rack.url_scheme" => "http", "rack.input" => StringIO.new(+""), "rack.errors" => $stderr,
        "rperf.wait" => ->(seconds) { wait_client(sock, seconds) },
        "rperf.send" => ->(window, seconds, headers, opts) { send_window(sock, window, seconds, headers, opts) } }
    end

    # PprofApp's "rperf.send": the window's end and its pprof response left
    # to C (ruby/window_send.c): at the end a postponed job closes the
    # window on whichever thread holds the GVL and a thread of its own
    # writes the response, so the answer does not wait for this thread to
    # get the GVL back (a time slice of every busy thread). This thread
    # waits as for any profile, then claims the window if nobody took it
    # (an idle process runs no job), or cancels it if the client left or
    # the listener stops. Returns nil (not sent: a window with children,
    # or no thread could be made), :sent, the wait's outcome when the
    # window is the caller's, or the parts the job closed it with when
    # the caller must answer (see PprofApp#send_window).
    def send_window(sock, window, seconds, headers, opts)
      mark = window.__mark_alone
      return nil unless mark

      done_r, done_w = IO.pipe
      sending = Rperf._c_send_window(mark, seconds, sock.fileno, done_w.fileno, head(200, headers), opts,
                                     @write_timeout)
      return nil unless sending

      outcome = wait_client(sock, seconds)
      # at the end the send's thread asks for the job: a moment for it to
      # run (an idle process runs it only once this thread blocks again)
      IO.select([done_r], nil, nil, SEND_GRACE) if outcome == :done
      return outcome if Rperf._c_send_take(sending, outcome != :done)

      Rperf._c_send_abort(sending) unless outcome == :done
      wait_sent(sending, done_r)
      case Rperf._c_send_state(sending)
      when :ruby then Rperf._c_send_parts(sending)
      when :failed
        # the encoder failed before anything was written: said as any
        # exporter error (a failed write leaves no error: the client left)
        err = Rperf._c_send_error(sending)
        respond(sock, *error(500, "pprof exporter: #{err}")) if err && outcome == :done
        :sent
      else :sent
      end
    ensure
      Rperf._c_send_finish(sending) if sending
      [done_r, done_w].each { |io| io&.close }
    end

    # Until the send's thread is done: its write has a deadline of its own;
    # a listener that stops aborts it.
    def wait_sent(sending, done_r)
      ready = IO.select([done_r, @wake_r], nil, nil, @write_timeout + 1)
      return if ready && ready[0].include?(done_r)

      Rperf._c_send_abort(sending)
    end

    # Request bytes as a String of the encoding Rack servers give (UTF-8
    # tagged, not checked: PprofApp treats values as bytes).
    def utf8(bytes)
      String.new(bytes, encoding: Encoding::UTF_8)
    end

    # The peer's address from the raw sockaddr: Ruby's own conversions call
    # getnameinfo without the GVL, and taking it back costs a time slice of
    # every busy thread before the request's window opens.
    def remote_addr(sock)
      raw = sock.getpeername
      family = raw.unpack1("S")
      if family == Socket::AF_INET && raw.bytesize >= 8
        raw.byteslice(4, 4).unpack("C4").join(".")
      elsif family == Socket::AF_INET6 && raw.bytesize >= 24
        IPAddr.new_ntoh(raw.byteslice(8, 16)).to_s
      else
        ""
      end
    rescue SystemCallError, SocketError, IPAddr::Error
      ""
    end

    def error(status, message)
      body = "rperf: #{message}\n"
      [status, { "content-type" => "text/plain; charset=utf-8", "x-go-pprof" => "1",
                 "content-length" => body.bytesize.to_s }, [body]]
    end

    # The status line and header lines of a response, but `connection`.
    def head(status, headers)
      out = String.new("HTTP/1.1 #{status} #{REASONS.fetch(status, 'Unknown')}\r\n", encoding: Encoding::BINARY)
      headers.each do |k, v|
        next if k.to_s.casecmp?("connection") || v.to_s.match?(/[\r\n]/)

        out << "#{k}: #{v}\r\n".b
      end
      out
    end

    def respond(sock, status, headers, body, head_only: false)
      out = head(status, headers)
      out << "connection: close\r\n\r\n"
      body.each { |chunk| out << chunk.b } unless head_only
      body.close if body.respond_to?(:close)
      write_all(sock, out) && sock.shutdown(Socket::SHUT_WR)
    end

    # All of `data` before the write deadline, or false. A stopping
    # listener still writes what the socket takes at once, and no more.
    def write_all(sock, data)
      deadline = now + @write_timeout
      until data.empty?
        n = sock.write_nonblock(data, exception: false)
        if n == :wait_writable
          remaining = deadline - now
          return false if remaining <= 0

          ready = IO.select([@wake_r], [sock], nil, remaining)
          return false if ready.nil? || ready[0].include?(@wake_r)

          next
        end
        data = data.byteslice(n..)
      end
      true
    end
  end

  # A fork child closes its copies of the listeners' sockets before
  # anything else of it runs (Rperf's own fork hook, in rperf.rb, runs
  # first: this one is prepended after it).
  module ServeForkHook
    def _fork
      pid = super
      Server.__after_fork_child if pid.zero?
      pid
    end
  end
  Process.singleton_class.prepend(ServeForkHook)

  class << self
    # Serve the pprof routes (Rperf::PprofApp) on a listener of its own;
    # returns the Rperf::Server (#port, #url, #stop). token: defaults to
    # RPERF_SERVE_TOKEN; start: makes a request while profiling is off start
    # an on-demand run (PprofApp). Binding to an address other than
    # loopback without a token is allowed, and said on stderr.
    def serve(port:, host: "127.0.0.1", token: Server.env_token, start: nil,
              read_timeout: Server::DEFAULT_READ_TIMEOUT, write_timeout: Server::DEFAULT_WRITE_TIMEOUT,
              max_connections: Server::DEFAULT_MAX_CONNECTIONS, max_profiles: PprofApp::DEFAULT_MAX_PROFILES,
              max_seconds: PprofApp::MAX_SECONDS)
      main_ractor!("serve")
      app = PprofApp.new(token: token, start: start, max_seconds: max_seconds, max_profiles: max_profiles)
      server = Server.new(port: port, host: host, app: app, read_timeout: read_timeout,
                          write_timeout: write_timeout, max_connections: max_connections)
      unless token || server.loopback?
        warn "rperf: serving profiles on #{server.url} to the network without a token (token: or RPERF_SERVE_TOKEN)"
      end
      server
    end
  end
end

Rperf::Server.__serve_from_env if ENV["RPERF_SERVE"]
