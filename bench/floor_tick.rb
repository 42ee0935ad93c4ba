# frozen_string_literal: true

# bench/floor_tick.rb — loads bench/floor_tick.c (a bare timer thread, no
# profiler) into this Ruby process: built with cc into a temporary shared
# object, called through Fiddle. The benches run their workloads with it as
# a configuration of its own ("tick"), side by side with the unprofiled and
# the profiled runs, so each profiler cost reads against what a timer thread
# waking at the same rate costs this machine in the same run.
#
#   FloorTick.available?   # false without cc or Fiddle (the column is skipped)
#   FloorTick.start(1000)  # raises if it cannot start; on a fixed grid
#   FloorTick.start(1000, drawn: true) # one wake-up at a drawn moment of
#                          # each period instead
#   FloorTick.stop         # -> wake-ups since start
#   FloorTick.hooks { ... } # runs the block with an empty Ruby thread event
#                           # hook installed (Ruby's own dispatch cost)
#   FloorTick.newobj { ... } # runs the block with an empty allocation
#                            # (NEWOBJ) hook installed (the floor of any
#                            # allocation profiler on Ruby's hook)

require "tmpdir"

module FloorTick
  SRC = File.expand_path("floor_tick.c", __dir__)

  class << self
    def available?
      load!
      !@start.nil?
    end

    def start(hz, drawn: false)
      load!
      raise "FloorTick: not available (#{@why})" unless @start
      raise "FloorTick: could not start a #{hz} Hz timer thread" unless @start.call(hz, drawn ? 1 : 0).zero?
    end

    def stop
      @stop.call
    end

    def hooks
      load!
      raise "FloorTick: not available (#{@why})" unless @start
      raise "FloorTick: this Ruby has no thread event hooks" unless @hooks_on.call.zero?

      begin
        yield
      ensure
        @hooks_off.call
      end
    end

    def newobj
      load!
      raise "FloorTick: not available (#{@why})" unless @start
      raise "FloorTick: could not add an allocation hook" unless @newobj_on.call.zero?

      begin
        yield
      ensure
        @newobj_off.call
      end
    end

    private

    def load!
      return if defined?(@loaded)

      @loaded = true
      begin
        require "fiddle"
      rescue LoadError => e
        @why = "no Fiddle: #{e.message}"
        return
      end
      so = File.join(Dir.tmpdir, "rperf-floor-tick-#{Process.pid}.so")
      unless system("cc", "-O2", "-shared", "-fPIC", "-o", so, SRC, "-lpthread", exception: false)
        @why = "cc failed or missing"
        return
      end
      lib = Fiddle.dlopen(so)
      File.unlink(so) # mapped already; nothing left behind
      @start = Fiddle::Function.new(lib["floor_tick_start_schedule"], [Fiddle::TYPE_LONG, Fiddle::TYPE_INT],
                                    Fiddle::TYPE_INT)
      @stop = Fiddle::Function.new(lib["floor_tick_stop"], [], Fiddle::TYPE_LONG)
      @hooks_on = Fiddle::Function.new(lib["floor_hooks_on"], [], Fiddle::TYPE_INT)
      @hooks_off = Fiddle::Function.new(lib["floor_hooks_off"], [], Fiddle::TYPE_INT)
      @newobj_on = Fiddle::Function.new(lib["floor_newobj_on"], [], Fiddle::TYPE_INT)
      @newobj_off = Fiddle::Function.new(lib["floor_newobj_off"], [], Fiddle::TYPE_INT)
    end
  end
end
