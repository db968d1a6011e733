package runs

import (
	"context"

	"go.uber.org/zap"

	"github.com/card-dev/card/daemon/store"
)

// persistBatch bounds how many events one store transaction writes.
const persistBatch = 512

// persist writes a run's kept events to the store in order, off the child's
// stdout goroutine, until the terminal event is written. One transaction
// per batch: a commit per event would leave a chatty run's history seconds
// behind it.
func (m *Manager) persist(lr *Run, done chan<- struct{}) {
	defer close(done)
	ctx := context.Background()
	for {
		pending, ended, changed := lr.log.unwritten()
		for start := 0; start < len(pending); start += persistBatch {
			chunk := pending[start:min(start+persistBatch, len(pending))]
			batch := make([]store.NewEvent, len(chunk))
			for i, e := range chunk {
				batch[i] = store.NewEvent{Seq: e.seq, Kind: e.kind, Payload: e.raw}
			}
			if err := m.store.AppendEvents(ctx, lr.id, batch); err != nil {
				m.log.Warn("could not record run events", zap.String("run_id", lr.id),
					zap.Int64("first_seq", chunk[0].seq), zap.Int("count", len(chunk)), zap.Error(err))
			}
		}
		caughtUp := lr.log.markWritten(len(pending))
		if ended && caughtUp {
			return
		}
		if caughtUp {
			<-changed
		}
	}
}
