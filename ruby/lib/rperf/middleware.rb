# frozen_string_literal: true

# Rperf::Middleware — Rack middleware that labels every request's samples
# with `endpoint: "METHOD PATH"` (key configurable with label_key:), where
# PATH is PATH_INFO with its ids replaced (label: :normalized, the default),
# so that 200,000 URLs of one route make one label set, not 200,000.
#
# Each segment between slashes is replaced when it is, case-insensitively
# and with an optional ".ext" suffix kept (`/users/7.json` → `/users/:id.json`):
#   * a UUID (8-4-4-4-12 hex digits)                     → `:uuid`
#   * decimal digits only (`123`)                        → `:id`
#   * 16 or more hex digits with at least one digit
#     (SHA digests, Mongo ObjectIds, hex tokens)         → `:hex`
# Nothing else changes: `/v2/users`, `/2024-06-01`, slugs, a query string
# (not part of PATH_INFO) stay as they are.
# The scan is one pass over the bytes in C (ruby/normalize.c, a fraction
# of a µs per path); a path with no digit and no "-" is returned as it is,
# any other as a new String. Encodings whose bytes it cannot scan as ASCII
# (other multibyte ones, UTF-16/32) and invalid strings go through the
# regular expression below, which gives the same results (and raises for
# those the regexp cannot match, as before).
#
#   use Rperf::Middleware                                # "GET /users/:id"
#   use Rperf::Middleware, label: :raw                   # "GET /users/123"
#   use Rperf::Middleware, label: ->(env) { env["rperf.route"] }  # its own value
#   use Rperf::Middleware, label_key: :route
#
# A callable (a Proc, or any object with #call(env)) returns the label
# value; nil leaves the request without that label.
#
# Each request is a profile block (Rperf.profile): with a run started with
# `defer: true` only requests are sampled. It only labels and marks the
# request's thread, so it works in any Ractor (e.g. Ractor-based worker
# pools) and does nothing when the profiler is not running. A
# middleware built inside each worker Ractor may use any Proc. One shared
# between Ractors must be shareable (`Ractor.make_shareable(middleware)`),
# hence its app and its callable too: a module with `def self.call(env)`,
# or a Proc whose self and captured variables are shareable, e.g.
# `Ractor.make_shareable(nil.instance_exec { ->(env) { ... } })` (a lambda
# written at the top level has `main` as self and is refused with
# Ractor::IsolationError).

require "rperf"

module Rperf
  class Middleware
    LABELS = %i[normalized raw].freeze
    # One pass over the path: a segment (after a "/", before "/", "." or the
    # end) that is a UUID, digits only, or a long hex id.
    ID_SEGMENT = %r{
      (?<=/)
      (?:
        (?<uuid>\h{8}-\h{4}-\h{4}-\h{4}-\h{12})
      | (?<id>\d+)
      | (?<hex>(?=\h*\d)\h{16,})
      )
      (?=[/.]|\z)
    }x

    # Path with its ids replaced (see the file comment). A byte scan in C
    # (ruby/normalize.c); the regular expression for the encodings and
    # invalid strings the scan leaves to it.
    # A path that is not valid in its encoding (e.g. "%FF" decoded into a
    # UTF-8 String), or in an encoding that is not ASCII-compatible, is
    # normalised as bytes: labelling never raises into the request.
    def self.normalize(path)
      path = path.to_s
      path = path.b unless path.valid_encoding? && path.encoding.ascii_compatible?
      Rperf._c_normalize_path(path) || normalize_regexp(path)
    end

    def self.normalize_regexp(path)
      return path unless path.match?(/\d|-/)

      path.gsub(ID_SEGMENT) do
        m = Regexp.last_match
        m[:uuid] ? ":uuid" : m[:id] ? ":id" : ":hex"
      end
    end
    private_class_method :normalize_regexp

    def initialize(app, label_key: :endpoint, label: :normalized)
      unless label_key.is_a?(Symbol)
        raise ArgumentError, "label_key must be a Symbol, got #{label_key.inspect}"
      end
      unless LABELS.include?(label) || (label.respond_to?(:call) && callable_with_env?(label))
        raise ArgumentError, "label must be :normalized, :raw, or a Proc (or object with #call) " \
                             "taking the Rack env, got #{label.inspect}"
      end

      @app = app
      @label_key = label_key
      @label = label
      @builtin = LABELS.include?(label)
      @normalized = label == :normalized
    end

    # The request runs labelled; the thread's previous labels come back
    # after it, also when the app raises. With a built-in label a plain
    # Rack env is labelled in C from its bytes (ruby/request_label.c: no
    # String or Hash, also for a new label set); a callable label, or an
    # env the C path cannot read exactly as Ruby would, is labelled here,
    # with the same result.
    #
    # The request is a profile block too (Rperf.profile): a run started with
    # defer: true samples only requests. Its end comes before the labels
    # are restored.
    def call(env)
      prev = (@builtin && Rperf._c_label_request(@label_key, env, @normalized)) || label_request(env)
      Rperf._c_profile_enter
      begin
        @app.call(env)
      ensure
        Rperf._c_profile_leave
        Rperf._c_set_label(prev)
      end
    end

    private

    # The Ruby path: Rperf.label without a block; returns the previous
    # set's token.
    def label_request(env)
      value = endpoint(env)
      prev = Rperf._c_get_label
      Rperf.label(@label_key => value)
      prev
    end

    def endpoint(env)
      case @label
      when :normalized then "#{env['REQUEST_METHOD']} #{Middleware.normalize(env['PATH_INFO'])}"
      when :raw then "#{env['REQUEST_METHOD']} #{env['PATH_INFO']}"
      else @label.call(env)
      end
    end

    # A lambda or method must accept exactly one argument (the env).
    def callable_with_env?(label)
      fn = label.is_a?(Proc) || label.is_a?(Method) ? label : label.method(:call)
      return true if fn.is_a?(Proc) && !fn.lambda?

      arity = fn.arity
      arity == 1 || (arity.negative? && arity >= -2)
    end
  end
end
