package main

// What the processes of a run tell each other, through the world's
// allGather: in the solo world every exchange is this process's own
// message, in the per-rank world every rank's.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// agree all-gathers every process's outcome of a step: its payload, or its
// error. When any failed, every process returns an error naming each
// failed rank (its own error first, matchable with errors.Is and
// errors.As; ranks that failed with the same message are named together).
// A process alone returns its own outcome as it is.
func (n *node) agree(ctx context.Context, step string, mine []byte, failed error) ([][]byte, error) {
	msg := append([]byte{0}, mine...)
	if failed != nil {
		msg = append([]byte{1}, failed.Error()...)
	}
	all, err := n.w.allGather(ctx, msg)
	if err != nil {
		return nil, errors.Join(failed, fmt.Errorf("%s: %w", step, err))
	}
	if len(all) == 1 {
		if failed != nil {
			return nil, failed
		}
		return [][]byte{mine}, nil
	}
	me := n.w.proc()
	var order []string          // distinct messages of other ranks, in rank order
	byMsg := map[string][]int{} // message -> ranks
	out := make([][]byte, len(all))
	for r, m := range all {
		switch {
		case len(m) == 0:
			m = []byte("\x01empty message")
			fallthrough
		case m[0] != 0:
			if r == me {
				continue
			}
			k := string(m[1:])
			if _, ok := byMsg[k]; !ok {
				order = append(order, k)
			}
			byMsg[k] = append(byMsg[k], r)
		default:
			out[r] = m[1:]
		}
	}
	if failed == nil && len(order) == 0 {
		return out, nil
	}
	return nil, agreeError(step, me, failed, order, byMsg)
}

// agreeError is agree's error: this rank's own first, then every other
// failure, naming its ranks.
func agreeError(step string, me int, failed error, order []string, byMsg map[string][]int) error {
	var errs []error
	if failed != nil {
		errs = append(errs, fmt.Errorf("rank %d: %w", me, failed))
	}
	for _, k := range order {
		ranks := byMsg[k]
		if failed != nil && k == failed.Error() {
			errs = append(errs, fmt.Errorf("%s: rank(s) %v failed the same way", step, ranks))
			continue
		}
		errs = append(errs, fmt.Errorf("%s: rank(s) %v: %s", step, ranks, k))
	}
	return errors.Join(errs...)
}

// settle ends a step that may fail on some processes: every process
// learns whether every one's step went well, and returns an error naming
// those whose step failed (its own error first).
func (n *node) settle(ctx context.Context, step string, err error) error {
	_, err = n.agree(ctx, step, nil, err)
	return err
}

// sharedSeed is process 0's seed, on every process.
func (n *node) sharedSeed(ctx context.Context, mine uint64) (uint64, error) {
	var b []byte
	if n.leader() {
		b = binary.LittleEndian.AppendUint64(nil, mine)
	}
	all, err := n.w.allGather(ctx, b)
	if err != nil {
		return 0, fmt.Errorf("check: rank 0's seed: %w", err)
	}
	if len(all[0]) != 8 {
		return 0, fmt.Errorf("check: rank 0's seed is %d bytes", len(all[0]))
	}
	return binary.LittleEndian.Uint64(all[0]), nil
}

// gatherTimes replaces this process's times with every rank's, in rank
// order: each rank's time per collective and, in median mode, its
// per-iteration times.
func (n *node) gatherTimes(ctx context.Context, m *measurement) error {
	b := appendFloats(nil, m.rankTimesUS)
	for _, it := range m.iterRankUS {
		b = appendFloats(b, it)
	}
	all, err := n.w.allGather(ctx, b)
	if err != nil {
		return fmt.Errorf("gathering the times: %w", err)
	}
	iters := 0 // per rank, in median mode
	if len(m.iterRankUS) > 0 {
		iters = len(m.iterRankUS[0])
	}
	var ranks []float64
	var rows [][]float64
	for p, b := range all {
		rt, it, err := parseTimes(b, iters)
		if err != nil {
			return fmt.Errorf("gathering the times: rank %d sent %d bytes that do not parse: %w", p, len(b), err)
		}
		ranks, rows = append(ranks, rt...), append(rows, it...)
	}
	m.rankTimesUS, m.iterRankUS = ranks, rows
	return nil
}

// parseTimes reads one process's times: one per rank and, with iters > 0,
// a row of iters iteration times per rank.
func parseTimes(b []byte, iters int) (ranks []float64, rows [][]float64, err error) {
	if ranks, b, err = readFloats(b); err != nil {
		return nil, nil, err
	}
	for range ranks {
		if iters == 0 {
			break
		}
		var row []float64
		if row, b, err = readFloats(b); err != nil {
			return nil, nil, err
		}
		if len(row) != iters {
			return nil, nil, fmt.Errorf("%d iteration times, want %d", len(row), iters)
		}
		rows = append(rows, row)
	}
	if len(b) != 0 {
		return nil, nil, fmt.Errorf("%d bytes left over", len(b))
	}
	return ranks, rows, nil
}

// gatherCheck replaces this process's check counts with every rank's:
// the wrong elements of every rank (by rank) and the largest error of any.
func (n *node) gatherCheck(ctx context.Context, c *checkResult) error {
	w := make([]float64, len(c.wrongPerRank))
	for i, x := range c.wrongPerRank {
		w[i] = float64(x) // exact: counts of elements stay far below 2^53
	}
	all, err := n.w.allGather(ctx, appendFloats(appendFloats(nil, w), []float64{c.maxErr}))
	if err != nil {
		return fmt.Errorf("gathering the check: %w", err)
	}
	c.wrongPerRank = c.wrongPerRank[:0]
	for r, b := range all {
		ws, rest, err1 := readFloats(b)
		me, rest, err2 := readFloats(rest)
		if err := errors.Join(err1, err2); err != nil || len(rest) != 0 || len(me) != 1 {
			return fmt.Errorf("gathering the check: rank %d sent %d bytes that do not parse: %v", r, len(b), err)
		}
		for _, x := range ws {
			c.wrongPerRank = append(c.wrongPerRank, int64(x))
		}
		c.maxErr = math.Max(c.maxErr, me[0])
	}
	return nil
}

// appendFloats appends a count and the float64s.
func appendFloats(b []byte, xs []float64) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(xs)))
	for _, x := range xs {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x))
	}
	return b
}

// readFloats reads what appendFloats wrote.
func readFloats(b []byte) ([]float64, []byte, error) {
	if len(b) < 4 {
		return nil, nil, errors.New("short message")
	}
	k := int(binary.LittleEndian.Uint32(b))
	b = b[4:]
	if k > len(b)/8 {
		return nil, nil, fmt.Errorf("%d values in %d bytes", k, len(b))
	}
	var xs []float64
	for i := range k {
		xs = append(xs, math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:])))
	}
	return xs, b[8*k:], nil
}
