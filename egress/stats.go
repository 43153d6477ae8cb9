package egress

import (
	"cmp"
	"slices"
)

// Stats sums a proxy's attempts, its gateways' included: counts per
// decision, the destinations used with their bytes, and the refused ones
// with their reasons.
type Stats struct {
	Allowed  int64     `json:"allowed"`
	Refused  int64     `json:"refused"`
	Used     []Use     `json:"used"`     // by host, port, then gateway
	Refusals []Refusal `json:"refusals"` // by host, port, gateway, then reason
	// Unlisted counts attempts (included in Allowed and Refused) whose
	// destination did not fit the tables: each holds at most 1024 rows, so
	// a client cycling through names cannot grow them without bound.
	Unlisted int64 `json:"unlisted"`
}

// Use is one allowed destination, reached through the proxy or, with
// Gateway set, through that gateway.
type Use struct {
	Host      string `json:"host"`
	Port      int    `json:"port"`
	Gateway   string `json:"gateway,omitempty"`
	Rule      string `json:"rule"`
	Attempts  int64  `json:"attempts"`
	Failed    int64  `json:"failed"` // attempts the destination failed (upstream-failed, upstream-tls-failed)
	BytesUp   int64  `json:"bytes_up"`
	BytesDown int64  `json:"bytes_down"`
}

// Refusal is one refused destination and reason, with Gateway set for a
// gateway's requests.
type Refusal struct {
	Host     string `json:"host"`
	Port     int    `json:"port"`
	Gateway  string `json:"gateway,omitempty"`
	Reason   string `json:"reason"`
	Attempts int64  `json:"attempts"`
}

const maxStatsRows = 1024

type destKey struct {
	host    string
	port    int
	gateway string
}

type refusalKey struct {
	destKey
	reason string
}

type statsTable struct {
	allowed, refused, unlisted int64
	used                       map[destKey]*Use
	refusals                   map[refusalKey]*Refusal
}

func (t *statsTable) add(a *Attempt) {
	key := destKey{a.Host, a.Port, a.Gateway}
	if a.Decision == DecisionRefused {
		t.refused++
		rk := refusalKey{key, a.Reason}
		r, ok := t.refusals[rk]
		if !ok {
			if len(t.refusals) >= maxStatsRows {
				t.unlisted++
				return
			}
			if t.refusals == nil {
				t.refusals = map[refusalKey]*Refusal{}
			}
			r = &Refusal{Host: a.Host, Port: a.Port, Gateway: a.Gateway, Reason: a.Reason}
			t.refusals[rk] = r
		}
		r.Attempts++
		return
	}
	t.allowed++
	u, ok := t.used[key]
	if !ok {
		if len(t.used) >= maxStatsRows {
			t.unlisted++
			return
		}
		if t.used == nil {
			t.used = map[destKey]*Use{}
		}
		u = &Use{Host: a.Host, Port: a.Port, Gateway: a.Gateway, Rule: a.Rule}
		t.used[key] = u
	}
	u.Attempts++
	if failed(a.Reason) {
		u.Failed++
	}
	u.BytesUp += a.BytesUp
	u.BytesDown += a.BytesDown
}

// Stats returns the sums of every attempt recorded so far.
func (p *Proxy) Stats() Stats {
	p.recordMu.Lock()
	defer p.recordMu.Unlock()
	t := &p.stats
	s := Stats{Allowed: t.allowed, Refused: t.refused, Unlisted: t.unlisted, Used: []Use{}, Refusals: []Refusal{}}
	for _, u := range t.used {
		s.Used = append(s.Used, *u)
	}
	for _, r := range t.refusals {
		s.Refusals = append(s.Refusals, *r)
	}
	slices.SortFunc(s.Used, func(a, b Use) int {
		return cmp.Or(cmp.Compare(a.Host, b.Host), cmp.Compare(a.Port, b.Port), cmp.Compare(a.Gateway, b.Gateway))
	})
	slices.SortFunc(s.Refusals, func(a, b Refusal) int {
		return cmp.Or(cmp.Compare(a.Host, b.Host), cmp.Compare(a.Port, b.Port), cmp.Compare(a.Gateway, b.Gateway), cmp.Compare(a.Reason, b.Reason))
	})
	return s
}
