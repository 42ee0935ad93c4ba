// pprof-strict: exit status 1 unless every argument is a well-formed pprof
// profile (gzip-compressed or raw protobuf) that passes Profile.CheckValid.
// Built offline by script/setup-interop against Debian's
// golang-github-google-pprof-dev (GOPATH=/usr/share/gocode, GO111MODULE=off).
// The printed summary lets tests assert project rules (sample type, period).
package main

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/google/pprof/profile"
)

func load(name string) (*profile.Profile, error) {
	raw, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	// gzip magic 1f 8b: inflate first. Other input is taken as raw protobuf.
	if bytes.HasPrefix(raw, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			return nil, fmt.Errorf("gzip: %v", err)
		}
		if raw, err = io.ReadAll(zr); err != nil {
			return nil, fmt.Errorf("gzip: %v", err)
		}
	}
	// ParseUncompressed only decodes protobuf; profile.Parse would also try
	// legacy text formats and replace the real decode error by a generic one.
	p, err := profile.ParseUncompressed(raw)
	if err != nil {
		return nil, err
	}
	return p, p.CheckValid()
}

func main() {
	failed := false
	for _, name := range os.Args[1:] {
		p, err := load(name)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: INVALID: %v\n", name, err)
			failed = true
			continue
		}
		var types []string
		for _, st := range p.SampleType {
			types = append(types, st.Type+"/"+st.Unit)
		}
		fmt.Printf("%s: OK types=[%s] samples=%d locations=%d functions=%d mappings=%d period=%d\n",
			name, strings.Join(types, " "), len(p.Sample), len(p.Location),
			len(p.Function), len(p.Mapping), p.Period)
	}
	if failed {
		os.Exit(1)
	}
}
