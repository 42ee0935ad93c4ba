# frozen_string_literal: true

# Rperf::Middleware — Rack middleware that labels every request's samples
# with `endpoint: "METHOD PATH_INFO"` (key configurable with label_key:).
# It only calls Rperf.label, so it works in any Ractor (e.g. Ractor-based
# worker pools) and does nothing when the profiler is not running.
#
#   use Rperf::Middleware                      # config.ru
#   use Rperf::Middleware, label_key: :route

module Rperf
  class Middleware
    def initialize(app, label_key: :endpoint)
      unless label_key.is_a?(Symbol)
        raise ArgumentError, "label_key must be a Symbol, got #{label_key.inspect}"
      end

      @app = app
      @label_key = label_key
    end

    def call(env)
      Rperf.label(@label_key => "#{env['REQUEST_METHOD']} #{env['PATH_INFO']}") { @app.call(env) }
    end
  end
end
