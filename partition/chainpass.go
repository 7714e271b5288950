package partition

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/opplace/opplace/internal/progress"
)

// chainPass is the search over every prefix of the unit order at each
// candidate micro-batch count: what pipedream returns and what exact
// runs first (its pipedream pass and fallback). It depends only on the
// problem, so a problem computes it once and both partitioners share it.
type chainPass struct {
	// lat is the chain searched (coarsened when the work budget ran out).
	lat *lattice
	// sols is the optimum on lat at each of microBatchCandidates, nil
	// where nothing fits.
	sols []*solution
	// warn says the chain was coarsened, or is "".
	warn string
}

// chainMemo holds a problem's chain pass once computed; safe for
// concurrent use (one computation, the others wait for it).
type chainMemo struct {
	mu   sync.Mutex
	pass *chainPass
}

// chainPass returns the problem's chain pass, reporting progress as a
// task called name counting the micro-batch counts. With a deadline the
// search stops there (errDeadline) and is not memoised; without one the
// result is computed once per problem and shared. The solutions it
// returns are read-only.
func (p *Problem) chainPass(ctx context.Context, name string, deadline time.Time) (*chainPass, error) {
	if !deadline.IsZero() || p.chains == nil {
		return p.searchChains(ctx, name, deadline)
	}
	p.chains.mu.Lock()
	defer p.chains.mu.Unlock()
	if p.chains.pass != nil {
		n := int64(len(p.chains.pass.sols))
		task := progress.From(ctx).Start(name, n)
		task.Add(n)
		task.Done()
		return p.chains.pass, nil
	}
	cp, err := p.searchChains(ctx, name, deadline)
	if err == nil {
		p.chains.pass = cp
	}
	return cp, err
}

// searchChains runs the chain search at every candidate M under the
// shared work budget (chainSearch), each search one progress task.
func (p *Problem) searchChains(ctx context.Context, name string, deadline time.Time) (*chainPass, error) {
	Ms := p.microBatchCandidates()
	if p.Options.Stages > 0 && !p.uniform() {
		return nil, fmt.Errorf("a fixed count of %d stages is searched by degree, on devices of one type, and the cluster has %d", p.Options.Stages, len(p.m.classes))
	}
	cp := &chainPass{}
	warn, err := chainSearch(p, func(l *lattice, work *int64) error {
		task := progress.From(ctx).Start(name, int64(len(Ms)))
		defer task.Done()
		cp.lat = l
		cp.sols = make([]*solution, len(Ms))
		for i, M := range Ms {
			if err := ctx.Err(); err != nil {
				return err
			}
			var s *solution
			var err error
			if p.uniform() {
				s, err = solveUniform(p, l, M, work)
			} else {
				s, err = solveBounded(p, l, M, heuristicUB(p, l, M), deadline, work)
			}
			if err != nil {
				return err
			}
			cp.sols[i] = s
			task.Add(1)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	cp.warn = warn
	return cp, nil
}
