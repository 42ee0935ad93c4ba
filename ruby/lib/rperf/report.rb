# frozen_string_literal: true

# rperf/report.rb — reading profile files back and reporting on them, for
# `rperf report` and `rperf diff` (ruby/lib/rperf/cli.rb), in-process and
# without Go:
#
#   profile = Rperf::Report.load("profile.pb.gz")   # pprof (.pb.gz/.pb) or our speedscope JSON
#   profile = Rperf::Report.load("heap.pb.gz", sample_index: "alloc_space")  # a chosen sample type
#   profile = Rperf::Report.filter(profile, focus: /Foo/, threads: [1], labels: { "endpoint" => "GET /" })
#   puts Rperf::Report.top(profile, limit: 20)       # like `go tool pprof -top`
#   puts Rperf::Report.export(profile, :text)        # any exporter on the profile
#   puts Rperf::Report.diff(base, target, limit: 20) # per-function deltas
#   merged = Rperf::Report.merge([[pid, profile], ...]) # one profile, a numeric pid label per sample
#   both = Rperf::Report.combine(time_profile, heap_profile) # a time profile with the heap's allocations
#
# A Profile carries its data in the shape of a stop result Hash
# (:aggregated_samples [[frames leaf first, weight, thread_seq, label_set_id]],
# :label_sets, :threads, :mode, :frequency, …), so every exporter can encode
# it. Weights of a time sample type are converted to nanoseconds at load;
# other units (count, bytes, …) are kept as they are. Samples whose value is
# 0 or negative carry no weight and are left out.
#
# pprof files are decoded by our own C reader (Rperf._decode_pprof,
# exporters/pprof_decode.c): Go's CPU profiles, profiles re-encoded by
# `go tool pprof -proto` and ours. The samples a run took (:sampling_count,
# a text report's "Samples:") come from rperf's comment "sampling count:
# N" (a pprof sample is a distinct stack); a filtered profile has none. The sample type shown is the profile's
# default one, else its last (as pprof does), unless load's sample_index:
# names another ("time": the profile's time type; or a sample type name).
#
# A heap profile (sample types alloc_objects, alloc_space, inuse_objects,
# inuse_space: ours, or Go's runtime heap profile) loads as a result of
# mode :alloc with :allocations (all four values per entry, the `class`
# label as the class name), so merge and the exporters keep every value;
# top/diff/filter count the chosen type (`--label class=String` filters
# by class). Every problem with a file is a Rperf::Report::Error (an
# ArgumentError) whose message names the file.

require "json"

module Rperf
  module Report
    class Error < ArgumentError; end

    # file: the path; format: :pprof or :json; type/unit: the sample type
    # shown (unit "nanoseconds" for every time type); data: the result Hash
    # (with :allocations for a heap profile); filters: what filter()
    # applied, as the options that asked for it.
    Profile = Struct.new(:file, :format, :type, :unit, :data, :filters, keyword_init: true) do
      # A heap profile: its samples are data[:allocations][:samples] and
      # `type` is the allocation type counted.
      def alloc?
        ALLOC_TYPES.include?(type) && data.key?(:allocations)
      end
    end

    # The heap-profile sample types (Go's order) and what --sample-index takes.
    ALLOC_TYPES = %w[alloc_objects alloc_space inuse_objects inuse_space].freeze
    SAMPLE_INDEXES = ["time", *ALLOC_TYPES].freeze
    # The label that carries an allocation's class in a heap pprof.
    CLASS_LABEL = "class"

    TIME_UNITS = { "nanoseconds" => 1, "ns" => 1, "microseconds" => 1_000, "us" => 1_000,
                   "milliseconds" => 1_000_000, "ms" => 1_000_000, "seconds" => 1_000_000_000,
                   "s" => 1_000_000_000 }.freeze
    BYTE_UNITS = %w[bytes byte B].freeze
    # Labels our pprof encoder writes for every sample (numeric).
    THREAD_LABEL = "thread_seq"
    RACTOR_LABEL = "ractor"
    # The label merge gives every sample: the process that took it
    # (written as a numeric pprof label, exporters/pprof.c).
    PID_LABEL = :pid

    module_function

    # ---- reading -----------------------------------------------------------

    # sample_index: nil (the file's default type), "time" (its time type) or
    # a sample type name such as "alloc_space".
    def load(path, sample_index: nil)
      path = path.to_s
      raise Error, "#{path}: no such file" unless File.exist?(path)
      raise Error, "#{path}: is a directory, not a profile" if File.directory?(path)

      bytes = begin
        File.binread(path)
      rescue SystemCallError, IOError => e
        raise Error, "#{path}: cannot read: #{e.message}"
      end
      json?(bytes) ? from_speedscope(path, bytes, sample_index) : from_pprof(path, bytes, sample_index)
    end

    # Our JSON is text starting with "{"; pprof is binary (or gzip).
    def json?(bytes)
      bytes.b.lstrip.start_with?("{")
    end

    def from_pprof(path, bytes, sample_index = nil)
      raw = begin
        Rperf._decode_pprof(bytes, path)
      rescue ArgumentError => e
        raise Error, e.message
      end
      types = raw[:sample_types]
      raise Error, "#{path}: not a readable pprof profile: no sample types" if types.empty?

      index = if sample_index
                pick_index(path, types, sample_index)
              else
                types.index { |t, _| t == raw[:default_sample_type] } || types.size - 1
              end
      type, unit = types[index]
      columns = ALLOC_TYPES.map { |n| types.index { |t, _| t == n } }
      data = if ALLOC_TYPES.include?(type) && columns.all?
               heap_data(raw, columns)
             else
               time_data(raw, index, type, TIME_UNITS[unit])
             end
      data[:start_time_ns] = raw[:time_nanos] if raw[:time_nanos].positive?
      data[:duration_ns] = raw[:duration_nanos] if raw[:duration_nanos].positive?
      count = sampling_count(raw)
      data[:sampling_count] = count if count
      Profile.new(file: path, format: :pprof, type: type, unit: TIME_UNITS[unit] ? "nanoseconds" : unit, data: data)
    end

    # The index of the sample type `want` ("time": the first with a time unit).
    def pick_index(path, types, want)
      index = if want == "time"
                types.index { |_, u| TIME_UNITS[u] }
              else
                types.index { |t, _| t == want }
              end
      return index if index

      raise Error, "#{path}: no #{want} sample type in this profile " \
                   "(its types: #{types.map { |t, u| "#{t}/#{u}" }.join(', ')})"
    end

    # One sample type's values as the weights of :aggregated_samples.
    def time_data(raw, index, type, scale)
      builder = Builder.new
      raw[:samples].each do |frames, values, labels|
        weight = values[index]
        next unless weight.positive?

        builder.add(frames, scale ? weight * scale : weight, labels)
      end
      builder.data(mode: type == "wall" ? :wall : :cpu, frequency: pprof_frequency(raw))
    end

    # A heap profile as a result of mode :alloc: every sample with a value
    # > 0 an :allocations entry with its four values (`columns`: their
    # indices) and its `class` label as the class name.
    def heap_data(raw, columns)
      builder = Builder.new
      raw[:samples].each do |frames, values, labels|
        four = columns.map { |i| values[i].negative? ? 0 : values[i] }
        next if four.all?(&:zero?)

        klass = labels&.[](CLASS_LABEL)
        labels = labels.reject { |k, _| k == CLASS_LABEL } if klass
        builder.add_allocation(frames, klass.is_a?(String) ? klass : nil, four, labels)
      end
      interval = raw[:comments].filter_map { |c| c[/\Aallocation interval: (\d+)\z/, 1]&.to_i }.first
      builder.data(mode: :alloc, frequency: pprof_frequency(raw), interval: interval)
    end

    # The samples the run took, as rperf's pprof comment "sampling count: N"
    # tells (a pprof sample is a distinct stack, not a sample taken); nil
    # when the file does not say (Go's, or written by an older rperf).
    def sampling_count(raw)
      raw[:comments].each { |c| return Regexp.last_match(1).to_i if c =~ /\Asampling count: (\d+)\z/ }
      nil
    end

    def pprof_frequency(raw)
      raw[:comments].each { |c| return Regexp.last_match(1).to_i if c =~ /\Afrequency: (\d+)Hz\z/ }
      period_unit = raw[:period_type]&.last
      return 0 unless TIME_UNITS[period_unit] && raw[:period].positive?

      (1_000_000_000.0 / (raw[:period] * TIME_UNITS[period_unit])).round
    end

    # speedscope's file format as exporters/json.c writes it: shared frames,
    # one sampled profile per thread named "thread <seq> [\"name\"] [ractor <id>]".
    def from_speedscope(path, bytes, sample_index = nil)
      doc = begin
        ::JSON.parse(bytes.dup.force_encoding(Encoding::UTF_8).scrub)
      rescue ::JSON::ParserError => e
        raise Error, "#{path}: not a readable profile: invalid JSON (#{e.message.lines.first.strip})"
      end
      bad = ->(why) { raise Error, "#{path}: not a readable speedscope profile: #{why}" }
      bad.("no shared frames") unless doc.is_a?(Hash) && doc.dig("shared", "frames").is_a?(Array)
      bad.("no profiles") unless doc["profiles"].is_a?(Array)
      frames = doc["shared"]["frames"].each_with_index.map do |f, i|
        bad.("frame #{i} is not an object with a name") unless f.is_a?(Hash) && f["name"].is_a?(String)
        name = f["name"] == "(unknown)" ? "" : f["name"]
        [f["file"].is_a?(String) ? f["file"] : "", name, f["line"].is_a?(Integer) ? f["line"] : 0].freeze
      end
      mode = doc["name"].to_s[/\Arperf (cpu|wall) profile\z/, 1]
      alloc_type = doc["name"].to_s[/\Arperf (#{ALLOC_TYPES.join('|')}) profile\z/o, 1]
      units = []
      builder = Builder.new
      doc["profiles"].each_with_index do |prof, pi|
        next if prof.is_a?(Hash) && prof["name"] == "empty" && prof["samples"] == []
        bad.("profile #{pi} is not an object") unless prof.is_a?(Hash)
        unless prof["type"] == "sampled"
          bad.("profile #{pi} has type #{prof['type'].inspect}; only sampled profiles are read")
        end
        samples, weights = prof["samples"], prof["weights"]
        unless samples.is_a?(Array) && weights.is_a?(Array) && samples.size == weights.size
          bad.("profile #{pi}: samples and weights must be arrays of one length")
        end
        units << prof["unit"].to_s
        name = prof["name"].to_s
        seq = name[/\Athread (\d+)/, 1].to_i
        thread = { THREAD_LABEL => seq }
        thread[RACTOR_LABEL] = Regexp.last_match(1).to_i if name =~ / ractor (\d+)\z/
        builder.thread_name(seq, Regexp.last_match(1)) if name =~ /\Athread \d+ "(.*)"/
        scale = TIME_UNITS[prof["unit"].to_s] || 1
        samples.each_with_index do |stack, si|
          unless stack.is_a?(Array) && stack.all? { |i| i.is_a?(Integer) && i >= 0 && i < frames.size }
            bad.("profile #{pi} sample #{si}: frame indices must be integers below #{frames.size}")
          end
          w = weights[si]
          bad.("profile #{pi} sample #{si}: weight must be a number") unless w.is_a?(Numeric)
          next unless w.positive?

          stack = stack.reverse.map { |i| frames[i] }
          if alloc_type # one allocation type: its column, the others 0
            four = ALLOC_TYPES.map { |t| t == alloc_type ? w.round : 0 }
            builder.add_allocation(stack, nil, four, seq.zero? ? nil : thread)
          else
            builder.add(stack, (w * scale).round, seq.zero? ? nil : thread)
          end
        end
      end
      unit = units.uniq.size <= 1 ? units.first || "nanoseconds" : bad.("profiles with different units")
      type = alloc_type || mode || "samples"
      if sample_index && sample_index != type && !(sample_index == "time" && TIME_UNITS[unit])
        raise Error, "#{path}: no #{sample_index} sample type in this profile (its type: #{type})"
      end
      data = if alloc_type
               builder.data(mode: :alloc, frequency: 0)
             else
               builder.data(mode: mode == "wall" ? :wall : :cpu, frequency: 0)
             end
      unit = alloc_type.end_with?("_space") ? "bytes" : "count" if alloc_type
      Profile.new(file: path, format: :json, type: type, unit: TIME_UNITS[unit] ? "nanoseconds" : unit, data: data)
    end

    # Collects samples into the result Hash shape: user labels become label
    # sets, the thread_seq and ractor labels the sample's thread and
    # :threads.
    class Builder
      def initialize
        @samples = []
        @allocations = nil
        @sets = { {} => 0 }
        @threads = {}
        @names = {}
      end

      def thread_name(seq, name)
        @names[seq] = name
      end

      def add(frames, weight, labels)
        @samples << [frames, weight, *thread_and_set(labels)]
      end

      # An :allocations entry: [frames, class_name, *four values, seq, set].
      def add_allocation(frames, klass, four, labels)
        (@allocations ||= []) << [frames, klass, *four, *thread_and_set(labels)]
      end

      def data(mode:, frequency:, interval: nil)
        d = {
          mode: mode, frequency: frequency, aggregated_samples: @samples,
          label_sets: @sets.keys,
          threads: @threads.sort.map do |seq, ractor|
            { thread_seq: seq, ractor_id: ractor, name: @names[seq], native_tid: nil }
          end,
        }
        if mode == :alloc
          d[:allocations] = { samples: @allocations || [] }
          d[:allocations][:interval] = interval if interval
        end
        d
      end

      private

      # [thread_seq, label_set_id] of a sample's labels.
      def thread_and_set(labels)
        seq = 0
        set = 0
        ractor = nil
        if labels
          user = {}
          labels.each do |k, v|
            case k
            when THREAD_LABEL then seq = v if v.is_a?(Integer) && v.between?(0, 0xffffffff)
            when RACTOR_LABEL then ractor = v if v.is_a?(Integer) && v.between?(0, 0xffffffff)
            else user[k.to_sym] = v
            end
          end
          @threads[seq] ||= ractor || 0 if seq.positive?
          set = (@sets[user] ||= @sets.size) unless user.empty?
        end
        [seq, set]
      end
    end

    # ---- merging -----------------------------------------------------------

    # One profile of a process's time profile and its heap profile (the two
    # files of one part of a run that records allocations beside time,
    # Rperf::RunDir): the time profile with the heap profile's :allocations
    # added, their label sets and threads joined. Either may be nil (the
    # other is returned as it is; nil when both are).
    def combine(time, heap)
      return time || heap unless time && heap
      raise Error, "#{heap.file}: not a heap profile" unless heap.alloc?

      t = time.data
      h = heap.data
      list = (t[:label_sets].empty? ? [{}] : t[:label_sets]).dup
      sets = {}
      list.each_with_index { |set, i| sets[set] ||= i }
      ids = (h[:label_sets].empty? ? [{}] : h[:label_sets]).map { |set| sets[set] ||= (list << set).size - 1 }
      entries = h[:allocations][:samples].map { |e| [*e[0, 7], ids[e[7] || 0]] }
      threads = t[:threads].to_h { |th| [th[:thread_seq], th] }
      h[:threads].each { |th| threads[th[:thread_seq]] ||= th }
      data = t.merge(label_sets: list, threads: threads.values.sort_by { |th| th[:thread_seq] },
                     allocations: h[:allocations].merge(samples: entries))
      Profile.new(file: time.file, format: time.format, type: time.type, unit: time.unit, data: data,
                  filters: time.filters)
    end

    # One profile from the profiles of several processes of one run
    # ([[pid, Profile], ...], in that order; the rperf command's child
    # processes): every sample gets the label `pid` => pid (it replaces a
    # user label of that name), and each process's threads get thread_seqs
    # of their own, numbered after the previous process's, so that their
    # thread tables stay apart. The start is the earliest start, the
    # duration spans to the latest end. All profiles must count the same
    # sample type. Heap profiles merge their :allocations (all four values):
    # the allocations of every part add up, the objects in use are the
    # newest part's of each process (its windows, oldest first, each hold
    # the process's whole live heap at their end). Time profiles that carry
    # :allocations (combine) merge both, and merge with heap profiles (a
    # part whose time profile is missing).
    def merge(parts, file: nil)
      raise Error, "no profiles to merge" if parts.empty?

      # the type of the merged profile: the first time profile's, when
      # some part has time and allocations
      both = parts.any? { |_, p| !p.alloc? && p.data[:allocations] }
      first = (both && parts.map(&:last).find { |p| !p.alloc? }) || parts[0][1]
      samples = []
      allocations = first.alloc? || both ? [] : nil
      interval = nil
      sets = {}
      threads = []
      offset = 0
      starts = []
      ends = []
      newest = {}
      parts.each_with_index { |(pid, p), i| newest[pid] = i if p.data[:allocations] }
      parts.each_with_index do |(pid, prof), index|
        if (prof.type != first.type || prof.unit != first.unit || prof.alloc? != first.alloc?) && !(both && prof.alloc?)
          raise Error, "cannot merge #{prof.file} (#{prof.type}, #{prof.unit}) with " \
                       "#{first.file} (#{first.type}, #{first.unit})"
        end
        d = prof.data
        set_ids = (d[:label_sets].empty? ? [{}] : d[:label_sets]).map do |h|
          sets[{ PID_LABEL => pid, **h.except(PID_LABEL) }] ||= sets.size
        end
        top = 0
        # seq and set of a sample of this process in the merged profile
        place = lambda do |seq, set|
          seq ||= 0
          top = seq if seq > top
          [seq.positive? ? seq + offset : 0, set_ids[set || 0] + 1]
        end
        d[:aggregated_samples].each { |frames, w, seq, set| samples << [frames, w, *place.(seq, set)] }
        if allocations && d[:allocations]
          interval ||= d[:allocations][:interval]
          current = newest[pid] == index
          d[:allocations][:samples].each do |e|
            next unless current || e[2].positive?

            allocations << [*e[0, 4], *(current ? e[4, 2] : [0, 0]), *place.(e[6], e[7])]
          end
        end
        d[:threads].each do |t|
          top = t[:thread_seq] if t[:thread_seq] > top
          threads << t.merge(thread_seq: t[:thread_seq] + offset)
        end
        offset += top
        if (st = d[:start_time_ns])
          starts << st
          ends << st + d[:duration_ns] if d[:duration_ns]
        end
      end
      # label set 0 is the empty set (exporters: no labels); every merged
      # sample has a pid, so it is unused.
      data = { mode: first.data[:mode], frequency: first.data[:frequency], aggregated_samples: samples,
               label_sets: [{}, *sets.keys], threads: threads.sort_by { |t| t[:thread_seq] } }
      if allocations
        data[:allocations] = { samples: allocations }
        data[:allocations][:interval] = interval if interval
      end
      data[:start_time_ns] = starts.min unless starts.empty?
      data[:duration_ns] = ends.max - starts.min unless ends.empty?
      counts = parts.map { |_, p| p.data[:sampling_count] }
      data[:sampling_count] = counts.sum if counts.all?(Integer)
      Profile.new(file: file, format: first.format, type: first.type, unit: first.unit, data: data)
    end

    # ---- filtering ---------------------------------------------------------

    # A copy of `profile` keeping the samples that go through a frame
    # matching `focus` (function name or file), none matching `ignore`, on
    # one of `threads` (thread_seq Integers, empty = any) and carrying every
    # label of `labels` (String key => String value; "thread_seq" and
    # "ractor" compare with the sample's thread and Ractor, "class" with a
    # heap profile's allocation class).
    def filter(profile, focus: nil, ignore: nil, threads: [], labels: {})
      data = profile.data
      return profile if focus.nil? && ignore.nil? && threads.empty? && labels.empty?

      ractor_of = data[:threads].to_h { |t| [t[:thread_seq], t[:ractor_id]] }
      sets = data[:label_sets].map { |h| h.to_h { |k, v| [k.to_s, v.to_s] } }
      focused = frame_matcher(focus)
      ignored = frame_matcher(ignore)
      keep = lambda do |frames, seq, set, klass|
        next false unless threads.empty? || threads.include?(seq)
        next false unless labels.all? { |k, v| label_value(k, seq, sets[set], ractor_of, klass) == v }
        next false if focused && frames.none? { |f| focused[f] }
        next false if ignored && frames.any? { |f| ignored[f] }

        true
      end
      kept = data[:aggregated_samples].select { |frames, _w, seq, set| keep.(frames, seq, set, nil) }
      # the run's sampling count is not the filtered samples'
      filtered = data.except(:sampling_count).merge(aggregated_samples: kept)
      if profile.alloc?
        entries = data[:allocations][:samples].select { |e| keep.(e[0], e[6], e[7], e[1]) }
        filtered[:allocations] = data[:allocations].merge(samples: entries)
      end
      applied = []
      applied << "--focus #{focus.source}" if focus
      applied << "--ignore #{ignore.source}" if ignore
      threads.each { |t| applied << "--thread #{t}" }
      labels.each { |k, v| applied << "--label #{k}=#{v}" }
      Profile.new(**profile.to_h, data: filtered, filters: [*profile.filters, *applied])
    end

    # frame -> whether `re` matches its function name or file (memoised per
    # frame object: frames are shared between samples).
    def frame_matcher(re)
      re && Hash.new { |h, f| h[f] = re.match?(f[1]) || re.match?(f[0]) }.compare_by_identity
    end

    def label_value(key, seq, set, ractor_of, klass = nil)
      case key
      when THREAD_LABEL then seq.positive? ? seq.to_s : nil
      when RACTOR_LABEL then ractor_of[seq]&.positive? ? ractor_of[seq].to_s : nil
      when CLASS_LABEL then klass || set&.[](key)
      else set&.[](key)
      end
    end

    # [[frames, weight, thread_seq, label_set_id], …] of the type the
    # profile counts: :aggregated_samples, or for a heap profile the chosen
    # value of each :allocations entry (entries where it is 0 left out).
    def samples(profile)
      return profile.data[:aggregated_samples] unless profile.alloc?

      col = 2 + ALLOC_TYPES.index(profile.type)
      profile.data[:allocations][:samples].filter_map do |e|
        [e[0], e[col], e[6] || 0, e[7] || 0] if e[col].positive?
      end
    end

    # ---- tables ------------------------------------------------------------

    # {[path, label] => [flat, cum]} and the total weight. Flat: samples
    # whose leaf is the function; cum: samples containing it (once each).
    def functions(profile)
      keys = Hash.new { |h, f| h[f] = [f[0], f[1].empty? ? "(unknown)" : f[1]].freeze }.compare_by_identity
      rows = Hash.new { |h, k| h[k] = [0, 0] }
      total = 0
      samples(profile).each do |frames, w, *|
        total += w
        next if frames.empty?

        rows[keys[frames[0]]][0] += w
        frames.map { |f| keys[f] }.uniq.each { |k| rows[k][1] += w }
      end
      [rows, total]
    end

    def top(profile, limit: 50)
      rows, total = functions(profile)
      unit = profile.unit
      order = rows.sort_by { |(path, label), (flat, cum)| [-flat, -cum, label, path] }
      shown = order.first(limit)
      flat_shown = shown.sum { |_, (flat, _)| flat }
      out = +"File: #{profile.file}\n"
      out << "Type: #{profile.type} (#{unit})\n"
      if (d = profile.data[:duration_ns])
        out << "Duration: #{fmt(d, 'nanoseconds')}, Total samples = #{fmt(total, unit)}"
        out << " (#{pct(total, d)})" if TIME_UNITS[unit]
        out << "\n"
      end
      out << "Filters: #{profile.filters.join(' ')}\n" if profile.filters&.any?
      return out << "No samples#{' match the filters' if profile.filters&.any?}.\n" if order.empty?

      out << "Showing top #{shown.size} of #{order.size} functions, accounting for " \
             "#{fmt(flat_shown, unit)} (#{pct(flat_shown, total)} of #{fmt(total, unit)} total)\n"
      out << format("%10s %7s %7s %10s %7s  %s\n", "flat", "flat%", "sum%", "cum", "cum%", "function")
      sum = 0
      shown.each do |key, (flat, cum)|
        sum += flat
        out << format("%10s %7s %7s %10s %7s  %s\n", fmt(flat, unit), pct(flat, total), pct(sum, total),
                      fmt(cum, unit), pct(cum, total), name(key))
      end
      out
    end

    # Encode the profile with any exporter (:text, :collapsed, :pprof, …
    # and the HTML exporter where registered). `opts`: Rperf::Text's.
    # A heap profile is encoded with its type as sample_type: (all four
    # values in pprof).
    def export(profile, exporter, **opts)
      sample_type = profile.alloc? ? profile.type.to_sym : nil
      if exporter.to_sym == :text
        unless profile.unit == "nanoseconds" || profile.alloc?
          raise Error, "#{profile.file}: --text needs a time or heap profile; this one counts #{profile.unit} " \
                       "(#{profile.type}): use --top"
        end
        return Rperf::Text.encode(profile.data, **opts, sample_type: sample_type)
      end
      Rperf._encode(exporter.to_s, profile.data, sample_type && { sample_type: sample_type })
    end

    # Per-function change from `base` to `target`, sorted by the absolute
    # change of flat, then of cum.
    def diff(base, target, limit: 50)
      if base.unit != target.unit ||
         (base.type != target.type && (ALLOC_TYPES.include?(base.type) || ALLOC_TYPES.include?(target.type)))
        raise Error, "cannot compare #{base.file} (#{base.type}, #{base.unit}) with " \
                     "#{target.file} (#{target.type}, #{target.unit})"
      end
      unit = base.unit
      brows, btotal = functions(base)
      trows, ttotal = functions(target)
      zero = [0, 0].freeze
      deltas = (brows.keys | trows.keys).filter_map do |k|
        b = brows.fetch(k, zero)
        t = trows.fetch(k, zero)
        df = t[0] - b[0]
        dc = t[1] - b[1]
        [k, df, dc, b, t] unless df.zero? && dc.zero?
      end
      deltas.sort_by! { |k, df, dc, *| [-df.abs, -dc.abs, k[1], k[0]] }
      out = +"Base:   #{base.file} (#{base.type}, #{fmt(btotal, unit)} total)\n"
      out << "Target: #{target.file} (#{target.type}, #{fmt(ttotal, unit)} total)\n"
      out << "Change: #{signed(ttotal - btotal, unit)}"
      out << " (#{btotal.zero? ? 'n/a' : signed_pct(ttotal - btotal, btotal)})\n"
      return out << "No function changed.\n" if deltas.empty?

      shown = deltas.first(limit)
      out << "Showing top #{shown.size} of #{deltas.size} changed functions, sorted by |flat Δ|\n"
      out << format("%11s %11s %12s %12s  %s\n", "flat Δ", "cum Δ", "base flat", "target flat", "function")
      shown.each do |k, df, dc, b, t|
        out << format("%11s %11s %12s %12s  %s\n", signed(df, unit), signed(dc, unit), fmt(b[0], unit),
                      fmt(t[0], unit), name(k))
      end
      out
    end

    # ---- formatting --------------------------------------------------------

    def name(key)
      path, label = key
      path.empty? ? label : "#{label} (#{path})"
    end

    # A value with the unit scaled to its size, pprof-style: 140ms, 1.20s, 512kB.
    def fmt(value, unit)
      return "0" if value.zero?

      v, u = scale(value, unit)
      s = format("%.2f", v).delete_suffix(".00")
      "#{s}#{u}"
    end

    def scale(value, unit)
      a = value.abs
      if TIME_UNITS[unit]
        ns = value * TIME_UNITS[unit]
        a = ns.abs
        return [ns / 3.6e12, "hrs"] if a >= 3.6e12
        return [ns / 1e9, "s"] if a >= 1e9
        return [ns / 1e6, "ms"] if a >= 1e6
        return [ns / 1e3, "us"] if a >= 1e3

        [ns.to_f, "ns"]
      elsif BYTE_UNITS.include?(unit)
        %w[TB GB MB kB].each_with_index do |u, i|
          f = 1024.0**(4 - i)
          return [value / f, u] if a >= f
        end
        [value.to_f, "B"]
      else
        [value.to_f, ""]
      end
    end

    def signed(value, unit)
      value.positive? ? "+#{fmt(value, unit)}" : fmt(value, unit)
    end

    def pct(part, whole)
      whole.zero? ? "0%" : format("%.2f%%", part * 100.0 / whole)
    end

    def signed_pct(part, whole)
      (part.positive? ? "+" : "") + pct(part, whole)
    end
  end
end
