package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/usher-llm/usher/internal/glue/simfleet/simproc"
)

// cpuOf returns the CPU time a process has used (user and system), from /proc.
func cpuOf(tb testing.TB, pid int) time.Duration {
	tb.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Skipf("no /proc: %v", err)
	}
	// The fields after the command's closing parenthesis; utime and stime are the 12th and
	// 13th of them, in clock ticks (100 a second on Linux).
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			tb.Fatal(err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

// BenchmarkPickerProcessCPU is the CPU the picker process spends per request, what its
// Deployment's CPU request is sized from: a picker process in front of four simulated servers
// (scraped every 100 ms and health-checked, as in production), eight streams at a time from
// the ext_proc harness, each through the whole protocol (headers, body and pick, the answer's
// headers and chunks relayed from the server it picked, end of stream). It reports the
// picker's CPU per request (cpu-µs/req) and its CPU while idle (idle-millicores: scraping and
// probes). Run it with a fixed count, e.g. -benchtime=4000x.
func BenchmarkPickerProcessCPU(b *testing.B) {
	var servers []string
	for range 4 {
		servers = append(servers, strings.TrimPrefix(simproc.Start(b, simproc.Options{}).URL, "http://"))
	}
	p := startEPPProcess(b, "-endpoints="+strings.Join(servers, ","))
	pid := p.cmd.Process.Pid
	e := newEnvoy(b, p.addr)
	time.Sleep(time.Second) // started, scraped
	idleFrom, idleAt := cpuOf(b, pid), time.Now()
	time.Sleep(3 * time.Second)
	idle := float64(cpuOf(b, pid)-idleFrom) / float64(time.Since(idleAt)) * 1000
	body := []byte(`{"model":"usher/demo","stream":true,"max_tokens":4,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"` +
		strings.Repeat("Summarise the design document in three sentences. ", 20) + `"}]}`)
	ctx := context.Background()
	b.SetParallelism(4) // eight streams at a time on two cores
	from, start := cpuOf(b, pid), time.Now()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		n := 0
		for pb.Next() {
			n++
			if r := e.chat(ctx, body, fmt.Sprint("s", n%64)); r.err != nil {
				b.Error(r.err)
				return
			}
		}
	})
	b.StopTimer()
	used, elapsed := cpuOf(b, pid)-from, time.Since(start)
	// The idle share (scraping, probes) is not the requests' cost.
	busy := max(used-time.Duration(idle/1000*float64(elapsed)), 0)
	b.ReportMetric(float64(busy.Microseconds())/float64(b.N), "cpu-µs/req")
	b.ReportMetric(idle, "idle-millicores")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
}
