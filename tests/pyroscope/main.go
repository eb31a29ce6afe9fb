// A Pyroscope push endpoint for memperf's agent tests: Pyroscope's own connect handler
// (push.v1.PusherService/Push, from github.com/grafana/pyroscope/api) and its own pprof
// message (google.v1.Profile, decoded with its vtproto code), checked by the rules
// Pyroscope's distributor applies before it ingests a profile (pkg/validation), each
// received profile written as a JSON line for the test to read.
//
// Pyroscope's server module (github.com/grafana/pyroscope/v2) is not served by the Go
// module proxy here, so its validation is restated below, rule for rule, as its
// distributor applies it (ValidateProfile, ValidateLabels, the series labels' profile type
// of phlaredb/labels.CreateProfileLabels). tests/pyroscope/build.sh builds it once.
package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"unicode/utf8"

	"connectrpc.com/connect"
	profilev1 "github.com/grafana/pyroscope/api/gen/proto/go/google/v1"
	pushv1 "github.com/grafana/pyroscope/api/gen/proto/go/push/v1"
	"github.com/grafana/pyroscope/api/gen/proto/go/push/v1/pushv1connect"
)

// One received profile, as the test reads it.
type received struct {
	Tenant        string            `json:"tenant"`
	Authorization string            `json:"authorization"`
	Labels        map[string]string `json:"labels"`
	// name:sample_type:unit:period_type:period_unit, one per sample type (Pyroscope's
	// __profile_type__ of each series the profile becomes).
	ProfileTypes []string `json:"profile_types"`
	TimeNanos    int64    `json:"time_nanos"`
	Samples      []sample `json:"samples"`
}

type sample struct {
	// Function names, leaf first.
	Stack  []string          `json:"stack"`
	Values []int64           `json:"values"`
	Labels map[string]string `json:"labels"`
	Nums   map[string]int64  `json:"nums"`
}

type server struct {
	mu  sync.Mutex
	out *os.File
}

func (s *server) Push(ctx context.Context, req *connect.Request[pushv1.PushRequest]) (*connect.Response[pushv1.PushResponse], error) {
	var lines [][]byte
	if len(req.Msg.Series) == 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("no profiles received"))
	}
	for _, series := range req.Msg.Series {
		labels := map[string]string{}
		for _, l := range series.Labels {
			if err := validLabel(l.Name, l.Value, labels); err != nil {
				return nil, connect.NewError(connect.CodeInvalidArgument, err)
			}
			labels[l.Name] = l.Value
		}
		if labels["service_name"] == "" {
			return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("service_name is empty"))
		}
		for _, raw := range series.Samples {
			p, err := decode(raw.RawProfile)
			if err != nil {
				return nil, connect.NewError(connect.CodeInvalidArgument, err)
			}
			if err := validate(p); err != nil {
				return nil, connect.NewError(connect.CodeInvalidArgument, err)
			}
			r := summarize(p, labels)
			r.Tenant = req.Header().Get("X-Scope-OrgID")
			r.Authorization = req.Header().Get("Authorization")
			line, err := json.Marshal(r)
			if err != nil {
				return nil, connect.NewError(connect.CodeInternal, err)
			}
			lines = append(lines, line)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range lines {
		if _, err := s.out.Write(append(l, '\n')); err != nil {
			return nil, connect.NewError(connect.CodeInternal, err)
		}
	}
	return connect.NewResponse(&pushv1.PushResponse{}), nil
}

// decode reads a raw profile as Pyroscope's pprof.RawFromBytes does: gzipped or not.
func decode(b []byte) (*profilev1.Profile, error) {
	if len(b) > 2 && b[0] == 0x1f && b[1] == 0x8b {
		r, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, err
		}
		if b, err = io.ReadAll(r); err != nil {
			return nil, err
		}
	}
	p := &profilev1.Profile{}
	if err := p.UnmarshalVT(b); err != nil {
		return nil, fmt.Errorf("malformed profile: %w", err)
	}
	return p, nil
}

var legacyLabelName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// validLabel: a series label as validation.ValidateLabels takes it (legacy Prometheus
// names, each name once, a value of UTF-8).
func validLabel(name, value string, seen map[string]string) error {
	if !legacyLabelName.MatchString(name) {
		return fmt.Errorf("invalid label name %q", name)
	}
	if _, dup := seen[name]; dup {
		return fmt.Errorf("duplicate label name %q", name)
	}
	if !utf8.ValidString(value) {
		return fmt.Errorf("label %q: invalid utf8 value", name)
	}
	return nil
}

// validate: validation.ValidateProfile's rules.
func validate(p *profilev1.Profile) error {
	if len(p.SampleType) == 0 {
		return errors.New("empty profile")
	}
	if len(p.StringTable) == 0 || p.StringTable[0] != "" {
		return errors.New("string 0 should be empty string")
	}
	str := func(i int64) bool { return i >= 0 && int(i) < len(p.StringTable) }
	for _, st := range p.SampleType {
		if !str(st.Type) || !str(st.Unit) {
			return errors.New("sample type string index out of range")
		}
		if strings.Contains(p.StringTable[st.Type], "-") {
			return errors.New("sample type contains -")
		}
	}
	for _, l := range p.Location {
		if l.Id == 0 {
			return errors.New("location id is 0")
		}
	}
	for _, f := range p.Function {
		if f.Id == 0 {
			return errors.New("function id is 0")
		}
		if !str(f.Name) || !str(f.SystemName) || !str(f.Filename) {
			return errors.New("function string index out of range")
		}
	}
	for _, m := range p.Mapping {
		if !str(m.Filename) || !str(m.BuildId) {
			return errors.New("mapping string index out of range")
		}
	}
	for _, s := range p.Sample {
		if len(s.Value) != len(p.SampleType) {
			return errors.New("sample value length mismatch")
		}
		for _, l := range s.Label {
			if !str(l.Key) || !str(l.Str) {
				return errors.New("sample label string index out of range")
			}
		}
	}
	for _, s := range p.StringTable {
		if !utf8.ValidString(s) {
			return errors.New("invalid utf8 string")
		}
	}
	return nil
}

func summarize(p *profilev1.Profile, labels map[string]string) received {
	r := received{Labels: labels, TimeNanos: p.TimeNanos}
	var periodType, periodUnit string
	if p.PeriodType != nil {
		periodType, periodUnit = p.StringTable[p.PeriodType.Type], p.StringTable[p.PeriodType.Unit]
	}
	for _, st := range p.SampleType {
		r.ProfileTypes = append(r.ProfileTypes, strings.Join([]string{
			labels["__name__"], p.StringTable[st.Type], p.StringTable[st.Unit], periodType, periodUnit,
		}, ":"))
	}
	functions := map[uint64]string{}
	for _, f := range p.Function {
		functions[f.Id] = p.StringTable[f.Name]
	}
	locations := map[uint64][]string{}
	for _, l := range p.Location {
		// A location's lines are its inlined calls, the innermost first.
		for _, line := range l.Line {
			locations[l.Id] = append(locations[l.Id], functions[line.FunctionId])
		}
	}
	for _, s := range p.Sample {
		out := sample{Values: s.Value, Labels: map[string]string{}, Nums: map[string]int64{}}
		for _, id := range s.LocationId {
			out.Stack = append(out.Stack, locations[id]...)
		}
		for _, l := range s.Label {
			if l.Str != 0 {
				out.Labels[p.StringTable[l.Key]] = p.StringTable[l.Str]
			} else {
				out.Nums[p.StringTable[l.Key]] = l.Num
			}
		}
		r.Samples = append(r.Samples, out)
	}
	return r
}

func main() {
	listen := flag.String("listen", "127.0.0.1:4040", "address to listen on")
	output := flag.String("output", "", "file the received profiles are appended to, as JSON lines")
	flag.Parse()
	out, err := os.OpenFile(*output, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(pushv1connect.NewPusherServiceHandler(&server{out: out}))
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(http.Serve(l, mux))
}
