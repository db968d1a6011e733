package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/card-dev/card/api"
)

// usageSums is the one aggregate every usage figure comes from, so the
// budgets the gate enforces and the usage a client is shown can never
// disagree. A run counts in the span its created_at falls in (a refused run
// never started); usage is the JSON the run's end recorded.
const usageSums = `SELECT adapter,
	COALESCE(SUM(status <> 'refused'), 0),
	COALESCE(SUM(CASE WHEN status <> 'refused' THEN turns ELSE 0 END), 0),
	COALESCE(SUM(status = 'refused'), 0),
	COALESCE(SUM(json_extract(usage, '$.input_tokens')), 0),
	COALESCE(SUM(json_extract(usage, '$.output_tokens')), 0),
	COALESCE(SUM(json_extract(usage, '$.cached_input_tokens')), 0),
	SUM(total_cost_usd)
	FROM runs WHERE created_at >= ? AND created_at < ? AND (? = '' OR adapter = ?)
	GROUP BY adapter ORDER BY adapter`

// Usage sums the runs created in [from, to) per adapter (only adapter's
// when it is not empty), in adapter order; Date is left empty. CostUSD is
// nil for an adapter none of whose runs reported a cost.
func (s *Store) Usage(ctx context.Context, from, to time.Time, adapter string) ([]api.UsageRow, error) {
	rows, err := s.db.QueryContext(ctx, usageSums, ms(from), ms(to), adapter, adapter)
	if err != nil {
		return nil, fmt.Errorf("store: usage: %w", err)
	}
	defer func() { _ = rows.Close() }()
	var out []api.UsageRow
	for rows.Next() {
		var r api.UsageRow
		var cost sql.NullFloat64
		if err := rows.Scan(&r.Adapter, &r.Runs, &r.Turns, &r.Refused, &r.InputTokens, &r.OutputTokens, &r.CachedTokens, &cost); err != nil {
			return nil, fmt.Errorf("store: usage: %w", err)
		}
		if cost.Valid {
			c := cost.Float64
			r.CostUSD = &c
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: usage: %w", err)
	}
	return out, nil
}

// RecentAverage is the mean cost in USD and the mean tokens (input plus
// output) of adapter's last n finished runs that were not refused, the
// estimate a run in flight reserves against a budget; zeros when there are
// none. A run that reported no cost counts as costing nothing.
func (s *Store) RecentAverage(ctx context.Context, adapter string, n int) (usd, tokens float64, err error) {
	var c, t sql.NullFloat64
	err = s.db.QueryRowContext(ctx, `SELECT AVG(COALESCE(total_cost_usd, 0)),
		AVG(COALESCE(json_extract(usage, '$.input_tokens'), 0) + COALESCE(json_extract(usage, '$.output_tokens'), 0))
		FROM (SELECT total_cost_usd, usage FROM runs WHERE adapter = ? AND status NOT IN ('running', 'refused')
		ORDER BY id DESC LIMIT ?)`, adapter, n).Scan(&c, &t)
	if err != nil {
		return 0, 0, fmt.Errorf("store: recent average of %s: %w", adapter, err)
	}
	return c.Float64, t.Float64, nil
}
