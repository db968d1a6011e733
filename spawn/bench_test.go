package spawn

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BenchmarkRunnerAndParser streams 100 MB of Claude stream-json from a fake
// agent (this test binary, re-executed) through Run and the Claude parser,
// and reports throughput, the peak heap in use while it ran, and the
// process's peak RSS. Run with:
//
//	go test -run '^$' -bench RunnerAndParser -benchtime 3x ./spawn/
func BenchmarkRunnerAndParser(b *testing.B) {
	const size = 100 << 20
	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	var peakHeap uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var ms runtime.MemStats
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				runtime.ReadMemStats(&ms)
				if ms.HeapInuse > peakHeap {
					peakHeap = ms.HeapInuse
				}
			}
		}
	}()
	b.SetBytes(size)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var events int
		res, err := Run(context.Background(), RunSpec{
			Plan:    Plan{Program: self, Dir: dir},
			BaseEnv: []string{helperEnv + "=stream:" + strconv.Itoa(size)},
			Parser:  newClaudeParser(),
			OnEvent: func(Event) { events++ },
			Limits:  Limits{MaxOutput: 2 * size},
		})
		if err != nil {
			b.Fatal(err)
		}
		if res.Answer != "done" || events < 1000 {
			b.Fatalf("unexpected result %q after %d events", res.Answer, events)
		}
	}
	b.StopTimer()
	close(stop)
	wg.Wait()
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	b.ReportMetric(float64(peakHeap)/(1<<20), "peak-heap-MiB")
	b.ReportMetric(float64(ru.Maxrss)/1024, "peak-rss-MiB")
}
