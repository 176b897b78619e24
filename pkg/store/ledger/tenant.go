package ledger

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"time"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// Bounds of ListByTenant.
const (
	// MaxTenantRange is the widest time range one listing may ask for.
	MaxTenantRange = 31 * 24 * time.Hour
	// tenantScanFactor: one call reads at most this many rows per row of
	// its page (at least minTenantScan) before it returns what it found
	// and a token, so a rare status over a busy tenant costs bounded work
	// per call.
	tenantScanFactor = 10
	minTenantScan    = 1000
	// maxTenantParts bounds the hour partitions one call reads (empty
	// hours cost a query each).
	maxTenantParts = 48
)

// TenantQuery is a cross-job listing: a tenant's attempts whose slot is in
// [From, To), of the given statuses (empty: any).
type TenantQuery struct {
	Tenant   string
	From, To time.Time
	Statuses []sundialv1.ExecutionStatus
	// PageSize: <= 0 means DefaultPageSize; capped at MaxPageSize.
	PageSize  int
	PageToken string
}

// ListByTenant returns a tenant's attempts of every job in the query's
// time range, newest slot first (within a slot, by job id, execution id,
// then latest attempt first), keeping those whose status (as readers see
// it: FENCED for a superseded fence) is one of q.Statuses. It reads the
// slices of TableByTenant's hour partitions from To back to From, one
// query per hour with rows; the status filter is applied to the rows read,
// and one call reads at most 10 rows per row of its page (at least 1,000)
// and 48 hours, so a page may come back short, or empty, with a token to
// go on. nextPageToken is empty when the range is exhausted. The token
// carries the first page's range (q's is then ignored) and is bound to the
// tenant and the statuses (ErrInvalidPageToken otherwise).
func (r *Reader) ListByTenant(ctx context.Context, q TenantQuery) ([]*sundialv1.ExecutionAttempt, string, error) {
	switch {
	case q.Tenant == "":
		return nil, "", fmt.Errorf("%w: tenant is empty", ErrInvalidArgument)
	case q.From.IsZero() || q.To.IsZero() || !q.From.Before(q.To):
		return nil, "", fmt.Errorf("%w: the range [%s, %s) is empty", ErrInvalidArgument, q.From.UTC().Format(time.RFC3339), q.To.UTC().Format(time.RFC3339))
	case q.To.Sub(q.From) > MaxTenantRange:
		return nil, "", fmt.Errorf("%w: the range is %s, at most %s", ErrInvalidArgument, q.To.Sub(q.From), MaxTenantRange)
	}
	pageSize := q.PageSize
	if pageSize <= 0 {
		pageSize = DefaultPageSize
	}
	pageSize = min(pageSize, MaxPageSize)
	filter := q.hash()
	var cur tenantCursor
	if q.PageToken == "" {
		cur = tenantCursor{Filter: filter, FromMs: q.From.UnixMilli(), ToMs: q.To.UnixMilli(),
			Part: int(hourOf(q.To.Add(-time.Millisecond))), Stop: int(hourOf(q.From))}
	} else {
		var err error
		if cur, err = decodeTenantCursor(q.PageToken, filter); err != nil {
			return nil, "", err
		}
		// A token goes on with its first page's range (a default range
		// computed from now would have moved).
		q.From, q.To = time.UnixMilli(cur.FromMs), time.UnixMilli(cur.ToMs)
	}
	want := map[sundialv1.ExecutionStatus]bool{}
	for _, s := range q.Statuses {
		want[s] = true
	}
	budget := max(pageSize*tenantScanFactor, minTenantScan)
	var out []*sundialv1.ExecutionAttempt
	for parts := 0; ; parts++ {
		if parts == maxTenantParts {
			return out, cur.encode(), nil
		}
		st := Statement{CQL: r.selectTenant(cur.Last != nil), Idempotent: true}
		limit := budget + 1 // one row more: a partition that returns it has more
		if k := cur.Last; k == nil {
			st.Values = []any{q.Tenant, cur.Part, q.To, limit}
		} else {
			st.Values = []any{q.Tenant, cur.Part, time.UnixMilli(k.ScheduledMs), k.JobID, k.ExecutionID, k.Attempt, k.Fence, limit}
		}
		it := r.s.Iter(ctx, st)
		var (
			sr                     scanRow
			got                    int
			stopped, end, resumeAt bool
		)
		var bad error
		for it.Scan(sr.groupedDest()...) {
			got++
			switch {
			case stopped || bad != nil:
				continue // drain
			case sr.scheduled.Before(q.From):
				stopped, end = true, true
				continue
			case budget == 0:
				stopped, resumeAt = true, true
				continue
			}
			prev := cur.group()
			a := present(&sr, prev)
			if sr.err != nil {
				bad = sr.err
				continue
			}
			if a != nil && (len(want) == 0 || want[a.GetStatus()]) {
				if len(out) == pageSize {
					stopped, resumeAt = true, true
					continue
				}
				out = append(out, a)
			}
			budget--
			cur.Last = &tenantKey{ScheduledMs: sr.scheduled.UnixMilli(), JobID: sr.jobID, ExecutionID: sr.executionID,
				Attempt: sr.attempt, Fence: sr.fence, LiveFence: sr.group(prev).liveFence}
		}
		if err := it.Close(); err != nil {
			return nil, "", fmt.Errorf("ledger: list tenant %s hour %d: %w", q.Tenant, cur.Part, err)
		}
		if bad != nil {
			return nil, "", fmt.Errorf("ledger: list tenant %s hour %d: %w", q.Tenant, cur.Part, bad)
		}
		switch {
		case end:
			return out, "", nil
		case resumeAt:
			return out, cur.encode(), nil
		case got < limit && cur.Part <= cur.Stop:
			return out, "", nil
		case got < limit:
			cur.Part, cur.Last = int(hour(cur.Part).prev()), nil
		}
	}
}

func (r *Reader) selectTenant(after bool) string {
	if after {
		return fmt.Sprintf("SELECT %s FROM %s.%s WHERE tenant = ? AND hour = ?"+
			" AND (scheduled_at, job_id, execution_id, attempt, fence) < (?, ?, ?, ?, ?) LIMIT ?", groupedReadColumns, r.keyspace, TableByTenant)
	}
	return fmt.Sprintf("SELECT %s FROM %s.%s WHERE tenant = ? AND hour = ? AND scheduled_at < ? LIMIT ?",
		groupedReadColumns, r.keyspace, TableByTenant)
}

// hash binds a page token to the tenant and statuses it was issued for
// (the range travels in the token).
func (q TenantQuery) hash() uint64 {
	h := fnv.New64a()
	st := slices.Clone(q.Statuses)
	slices.Sort(st)
	_, _ = fmt.Fprintf(h, "%s\x00%v", q.Tenant, st)
	return h.Sum64()
}

// tenantCursor is ListByTenant's position: the hour partition being read,
// the last one to read, and the key of the last row read in it.
type tenantCursor struct {
	V      int        `json:"v"`
	Filter uint64     `json:"q"`
	FromMs int64      `json:"f"`
	ToMs   int64      `json:"u"`
	Part   int        `json:"p"`
	Stop   int        `json:"s"`
	Last   *tenantKey `json:"k,omitempty"`
}

type tenantKey struct {
	ScheduledMs int64  `json:"t"`
	JobID       string `json:"j"`
	ExecutionID string `json:"e"`
	Attempt     int32  `json:"a"`
	Fence       int64  `json:"f"`
	LiveFence   int64  `json:"l"`
}

const tenantCursorVersion = 1

func (c *tenantCursor) group() *groupKey {
	if c.Last == nil {
		return nil
	}
	return &groupKey{executionID: c.Last.ExecutionID, attempt: c.Last.Attempt, liveFence: c.Last.LiveFence}
}

func (c tenantCursor) encode() string {
	c.V = tenantCursorVersion
	b, _ := json.Marshal(c) // plain struct, cannot fail
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeTenantCursor(token string, filter uint64) (tenantCursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return tenantCursor{}, fmt.Errorf("%w: %v", ErrInvalidPageToken, err)
	}
	var c tenantCursor
	if err := json.Unmarshal(b, &c); err != nil {
		return tenantCursor{}, fmt.Errorf("%w: %v", ErrInvalidPageToken, err)
	}
	switch {
	case c.V != tenantCursorVersion:
		return tenantCursor{}, fmt.Errorf("%w: version %d", ErrInvalidPageToken, c.V)
	case c.Filter != filter:
		return tenantCursor{}, fmt.Errorf("%w: issued for another tenant or filter", ErrInvalidPageToken)
	case !hour(c.Part).valid() || !hour(c.Stop).valid() || c.Part < c.Stop,
		c.FromMs >= c.ToMs, c.ToMs-c.FromMs > MaxTenantRange.Milliseconds():
		return tenantCursor{}, fmt.Errorf("%w: bad hour range", ErrInvalidPageToken)
	}
	return c, nil
}
