# frozen_string_literal: true

# rperf/exporters.rb — exporter selection and the Ruby side of the exporter
# plugin API: the module encoders (Rperf::PProf, ::Collapsed, ::JSON, ::Text),
# Ruby plugins (Rperf.register_exporter), Rperf.exporters, Rperf.save, and the
# helpers Rperf.start/stop use (__resolve_exporter, __check_output,
# __export_at_stop). Files are written by exporters/writer.c (through
# Rperf._encode_file / _c_export_engine / _c_write_file).
#
# C exporters are encoded by rperf.so (ruby/export.c: Rperf._encode,
# Rperf._encode_file, Rperf._c_export_engine, Rperf._c_exporters,
# Rperf.gzip). Ruby and C exporters are selected by name the same way. At
# stop, a C exporter encodes straight from the engine's data (still held
# until Rperf.stop releases it); Ruby exporters get the result Hash. See
# docs/exporters.md.
#
# Every encoder takes `sample_type:` (Rperf::SAMPLE_TYPES): the time profile
# (:time, or :cpu / :wall matching the result's mode) or one of the four
# allocation types of a result that has :allocations. nil (the default)
# means the time profile when the result has time samples (mode :cpu or
# :wall), else :inuse_space. Rperf.sample_type(data, requested) tells which
# one an exporter encodes, or raises the ArgumentError it would raise.
#
# NOTE: inside `module Rperf`, the constant JSON means Rperf::JSON; use ::JSON
# for the standard library.

module Rperf
  # Accepted values of sample_type: (Symbols; the same Strings are accepted).
  SAMPLE_TYPES = %i[time cpu wall alloc_objects alloc_space inuse_objects inuse_space].freeze
  # The allocation sample types, in pprof's (Go's heap profile) order.
  ALLOC_SAMPLE_TYPES = %i[alloc_objects alloc_space inuse_objects inuse_space].freeze

  # pprof protobuf bytes (not compressed; Rperf.save gzips). An allocation
  # sample type gives a heap profile with all four allocation values and
  # that type as default_sample_type.
  module PProf
    def self.encode(data, sample_type: nil)
      Rperf._encode("pprof", data, Rperf.__export_opts(sample_type))
    end
  end

  # Folded stacks: "root;…;leaf weight\n" per distinct stack, sorted
  # (weight: ns, objects or bytes per the sample type).
  module Collapsed
    def self.encode(data, sample_type: nil)
      Rperf._encode("collapsed", data, Rperf.__export_opts(sample_type))
    end
  end

  # speedscope's JSON file format (one sampled profile per thread).
  module JSON
    def self.encode(data, sample_type: nil)
      Rperf._encode("json", data, Rperf.__export_opts(sample_type))
    end
  end

  # Flat and cumulative tables.
  module Text
    def self.encode(data, top_n: 50, header: true, sample_type: nil)
      unless top_n.is_a?(Integer) && top_n >= 0
        raise ArgumentError, "top_n must be a non-negative Integer, got #{top_n.inspect}"
      end
      Rperf._encode("text", data, { top_n: top_n, header: header ? true : false, sample_type: sample_type })
    end
  end

  # The self-contained HTML flame graph page.
  module HTML
    def self.encode(data, sample_type: nil)
      Rperf._encode("html", data, Rperf.__export_opts(sample_type))
    end
  end

  # Suffix rules applied before the registered exporters' own suffixes.
  EXPORTER_SUFFIXES = [
    [".pb.gz", :pprof], [".pprof", :pprof],
    [".collapsed", :collapsed], [".folded", :collapsed],
    [".json", :json], [".txt", :text],
  ].freeze
  DEFAULT_EXPORTER = :pprof
  EXPORTER_NAME = /\A[a-z0-9_-]+\z/

  # Copy-on-write: readers take the current frozen Hash without locking.
  @ruby_exporters = {}.freeze
  @exporters_lock = Mutex.new

  class << self
    # Register a Ruby exporter. `obj` responds to encode(data) -> String and
    # optionally to `extension` (a file suffix such as ".html", used by suffix
    # detection in Rperf.save / Rperf.start(output:)). Returns the name.
    def register_exporter(name, obj)
      sym = exporter_name!(name, "name")
      raise ArgumentError, "exporter #{sym.inspect} must respond to encode(data)" unless obj.respond_to?(:encode)
      @exporters_lock.synchronize do
        if c_exporter_names.include?(sym) || @ruby_exporters.key?(sym)
          raise ArgumentError, "exporter #{sym.inspect} is already registered"
        end
        @ruby_exporters = @ruby_exporters.merge(sym => obj).freeze
      end
      sym
    end

    # Remove a Ruby exporter; returns it, or nil if it was not registered.
    # Built-in (C) exporters cannot be removed.
    def unregister_exporter(name)
      sym = name.respond_to?(:to_sym) ? name.to_sym : name
      @exporters_lock.synchronize do
        obj = @ruby_exporters[sym]
        @ruby_exporters = @ruby_exporters.reject { |k, _| k == sym }.freeze if obj
        obj
      end
    end

    # All exporter names: C exporters (built-ins first), then Ruby ones.
    def exporters
      c_exporter_names + @ruby_exporters.keys
    end

    # Encode `data` (a stop/snapshot result Hash) and write it to `path`:
    # a regular file (or a new one) atomically (temporary file + rename,
    # owner and mode kept), through symlinks, and devices, FIFOs and
    # /dev/stdout in place (docs/exporters.md). Without exporter:/format:,
    # the suffix of `path` decides (default pprof). pprof files are gzipped.
    # sample_type: as the encoders take it (above). Returns path. Raises on
    # failure (a bad sample_type: before anything is written), leaving no
    # partial regular file.
    def save(path, data, exporter: nil, format: nil, sample_type: nil)
      name = __resolve_exporter(exporter, format, path)
      __check_sample_type(sample_type)
      flush_std_streams
      write_export(path_string!(path), data, name, sample_type)
      path
    end

    # The options Hash of Rperf._encode for a sample_type: (nil: none).
    def __export_opts(sample_type)
      sample_type.nil? ? nil : { sample_type: sample_type }
    end

    # A sample_type: value before any data is at hand (e.g. at start):
    # nil or one of SAMPLE_TYPES (Symbol or String), else ArgumentError
    # naming the option and the accepted values. Whether the result can give
    # it is checked when it is encoded (Rperf.sample_type).
    def __check_sample_type(sample_type)
      return if sample_type.nil?
      return if (sample_type.is_a?(Symbol) || sample_type.is_a?(String)) && SAMPLE_TYPES.include?(sample_type.to_sym)

      raise ArgumentError, "sample_type: must be one of #{SAMPLE_TYPES[0..-2].map(&:inspect).join(', ')} " \
                           "or #{SAMPLE_TYPES[-1].inspect}, got #{sample_type.inspect}"
    end

    # Rperf.start's check of output: (nil: nothing to check), before anything
    # starts: a directory, a missing directory, a directory where no file can
    # be created, a target that is not writable raise ArgumentError. When
    # the path is fine, a spare file descriptor is kept until the output is
    # written at stop, so that running out of descriptors meanwhile cannot
    # lose the profile.
    def __check_output(output)
      return if output.nil?
      path = path_string!(output)
      reason = _c_output_check(path)
      return unless reason

      raise ArgumentError, "output: #{path.inspect} cannot be written: #{reason} " \
                           "(accepted: a file in an existing writable directory, a symlink to one, " \
                           "or a character device, FIFO or socket)"
    end

    # Validate start(exporter:, format:, output:) before anything starts.
    # Returns the exporter name (Symbol), or nil when neither an exporter nor
    # an output was given. Raises ArgumentError naming the option.
    def __resolve_exporter(exporter, format, output)
      name = nil
      name = exporter_name!(exporter, "exporter", known: true) unless exporter.nil?
      unless format.nil?
        fname = exporter_name!(format, "format", known: true)
        if name && fname != name
          raise ArgumentError, "exporter: and format: disagree (exporter: #{name.inspect}, format: #{fname.inspect}); " \
                               "format: is an alias of exporter:, give one"
        end
        name = fname
      end
      return name if name
      return nil if output.nil?
      exporter_for_path(path_string!(output))
    end

    # Write the profile at stop, called by Rperf.stop before it releases the
    # engine's data: a C exporter's view is built from that data directly
    # (Rperf._c_export_engine falls back to `data` when the engine no longer
    # holds it, holds raw samples, or the result has :allocations). Never
    # raises for an exporter or I/O failure: reports "rperf: exporter NAME
    # failed: …" on stderr and returns false, leaving no partial file.
    # Returns true when the file was written. sample_type: as Rperf.save's
    # (nil: the result's default).
    def __export_at_stop(data, path, name, sample_type = nil)
      name ||= __resolve_exporter(nil, nil, path)
      path = path_string!(path)
      flush_std_streams
      if @ruby_exporters.key?(name)
        write_export(path, data, name, sample_type)
      else
        _c_export_engine(name.to_s, path, data, __export_opts(sample_type))
      end
      true
    rescue StandardError, ScriptError, NoMemoryError, SystemStackError => e
      begin
        $stderr.puts "rperf: exporter #{name || '?'} failed: #{e.message} (#{e.class})"
      rescue StandardError
        nil # stderr itself is broken: nothing more we can do
      end
      false
    ensure
      _c_output_release
    end

    # The exporter a path's suffix selects (longest match wins).
    def exporter_for_path(path)
      best = nil
      best_len = -1
      candidates = EXPORTER_SUFFIXES.map { |suffix, sym| [suffix, sym] }
      _c_exporters.each { |n, suffix, _desc, _gz| candidates << [suffix, n.to_sym] }
      @ruby_exporters.each do |sym, obj|
        next unless obj.respond_to?(:extension)
        ext = obj.extension
        candidates << [ext.to_s, sym] if ext && !ext.to_s.empty?
      end
      candidates.each do |suffix, sym|
        if suffix.length > best_len && path.end_with?(suffix)
          best = sym
          best_len = suffix.length
        end
      end
      # Built-in rules beat plugin suffixes of the same length (listed first).
      best || DEFAULT_EXPORTER
    end

    private

    def c_exporter_names
      _c_exporters.map { |n, *| n.to_sym }
    end

    def exporter_name!(value, option, known: false)
      unless value.is_a?(Symbol) || value.is_a?(String)
        raise ArgumentError, "#{option}: must be a Symbol or String, got #{value.inspect}"
      end
      sym = value.to_sym
      unless EXPORTER_NAME.match?(sym.to_s)
        raise ArgumentError, "#{option}: invalid exporter name #{sym.inspect} (use lowercase letters, digits, _ and -)"
      end
      if known && !exporters.include?(sym)
        raise ArgumentError, "#{option}: unknown exporter #{sym.inspect} " \
                             "(registered: #{exporters.map(&:inspect).join(', ')})"
      end
      sym
    end

    def path_string!(path)
      path = path.to_path if path.respond_to?(:to_path)
      raise ArgumentError, "output: must be a path String, got #{path.inspect}" unless path.is_a?(String)
      path
    end

    def write_export(path, data, name, sample_type = nil)
      obj = @ruby_exporters[name]
      if obj
        write_ruby_export(path, data, name, obj, sample_type)
      else
        _encode_file(name.to_s, data, path, __export_opts(sample_type))
      end
    end

    # A Ruby exporter whose encode takes a `sample_type:` keyword always gets
    # the resolved one (:time or an allocation type); one that does not is
    # called encode(data) as before, and refuses a sample_type: other than
    # the result's default.
    def write_ruby_export(path, data, name, obj, sample_type = nil)
      params = obj.method(:encode).parameters
      takes = params.any? { |kind, key| (%i[key keyreq].include?(kind) && key == :sample_type) || kind == :keyrest }
      bytes = if takes
                obj.encode(data, sample_type: Rperf.sample_type(data, sample_type))
              else
                if !sample_type.nil? && Rperf.sample_type(data, sample_type) != Rperf.sample_type(data)
                  raise ArgumentError, "sample_type: exporter #{name.inspect} only encodes the result's default " \
                                       "(#{Rperf.sample_type(data).inspect}): its encode has no sample_type: keyword"
                end
                obj.encode(data)
              end
      unless bytes.is_a?(String)
        raise TypeError, "exporter #{name.inspect} returned #{bytes.class}, expected a String"
      end
      _c_write_file(path, bytes)
    end

    # Our own buffered output first, then the profile (it may go to the same
    # descriptor: output: "/dev/stdout").
    def flush_std_streams
      [$stdout, $stderr].each do |io|
        io.flush
      rescue StandardError
        nil
      end
    end
  end
end
