package collectives

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/team"
)

// The agreement of New: every process all-gathers (team.Team.AllGather)
// its outcome and, when its own part went well, the configuration it
// resolved after every per-team adjustment, as one fixed-size record.
// Every rank then compares the same records, so every rank reaches the
// same verdict: go on, a *ConfigMismatchError, or a team.PeerError naming
// the ranks that failed.

// source is where a setting's value came from.
type source uint8

const (
	fromDefault source = iota
	fromOption
	fromEnv
)

// stepNew is the step a team.PeerError names for a rank whose New failed.
const stepNew = "collectives.New"

const (
	// wireMagic starts every record ("NVCF" in little-endian order), so
	// that a process that called another collective of the team's
	// bootstrap instead is named rather than misread.
	wireMagic = 0x4643564e
	// wireVersion changes with the record's layout or meaning.
	wireVersion = 8
	// Status of a record: wireFailed is followed by the rank's error
	// message (at most maxFailMsg bytes).
	wireOK     = 0
	wireFailed = 1
	maxFailMsg = 2048
)

// wireConfig is one process's record: the values its ranks will run
// with, and where they came from. Fixed size, little-endian.
type wireConfig struct {
	Magic   uint32
	Version uint16
	Status  uint8
	// Flavor is the kernels' flavor (kernels.Flavor), from the team's
	// transport.
	Flavor uint8
	// Size is the team's number of ranks.
	Size uint32
	// PTXHasLL: every local rank's loaded module has the LL kernels.
	PTXHasLL                                                      uint8
	LLFrom, OneShotFrom, GridFrom, TimeoutFrom, StageFrom, CEFrom uint8 // source
	MinGridFrom                                                   uint8 // source
	// LLMax is the LL limit in effect (0: off); LLAsked the resolved
	// one, before the PTX check.
	LLMax, LLAsked uint64
	// OneShotMax is the one-shot limit in effect (DefaultOneShotMax2 for
	// 2 ranks when defaulted).
	OneShotMax uint64
	// MaxGrid is the largest grid in effect, GridAsked the resolved one
	// before the team's clamp.
	MaxGrid, GridAsked uint32
	// MinGrid is the grid spread at one vector a thread (WithMinGrid).
	MinGrid uint32
	_       [4]byte
	// TimeoutNs is the kernels' barrier timeout.
	TimeoutNs int64
	// StageBytes is the size of each staging area.
	StageBytes uint64
	// CEMin is the copy-engine limit (WithCopyEngineMin; 0: never).
	CEMin uint64
	// LLTwoMax is the two-step LL reduce's limit (WithLLTwoMax; 0:
	// never), LLTwoFrom its source.
	LLTwoMax  uint64
	LLTwoFrom uint8
	// LLTwoBcastFrom is LLTwoBcastMax's source.
	LLTwoBcastFrom uint8
	_              [6]byte
	// LLTwoBcastMax is the two-step LL broadcast's limit
	// (WithLLTwoBcastMax; 0: never).
	LLTwoBcastMax uint64
	// LLLines is the LL area's lines a slot, which the kernels' slot
	// offsets take from each rank's own (0: LL off).
	LLLines uint64
	// RingMin is the ring reduce's limit (WithRingMin; 0: never),
	// RingBytes its FIFO (WithRingBytes), RingMinFrom and RingBytesFrom
	// their sources.
	RingMin, RingBytes         uint64
	RingMinFrom, RingBytesFrom uint8
	// PullFrom is PullMin's source.
	PullFrom uint8
	_        [5]byte
	// PullMin is the reduce's pull limit in effect (WithReducePullMin;
	// 0: never).
	PullMin uint64
}

// wire is c's record, once prepare succeeded.
func (c *Comm) wire() wireConfig {
	cfg := &c.cfg
	return wireConfig{
		Magic: wireMagic, Version: wireVersion, Status: wireOK,
		Flavor: uint8(c.flavor), Size: uint32(c.size), PTXHasLL: b2u(c.ptxLL),
		LLFrom: uint8(cfg.llFrom), OneShotFrom: uint8(cfg.oneShotFrom), GridFrom: uint8(cfg.gridFrom),
		TimeoutFrom: uint8(cfg.timeoutFrom), StageFrom: uint8(cfg.stageFrom), CEFrom: uint8(cfg.ceFrom), MinGridFrom: uint8(cfg.minGridFrom),
		LLMax: c.llMax, LLAsked: cfg.llMax, OneShotMax: cfg.oneShotMax,
		MaxGrid: uint32(c.maxGrid), GridAsked: uint32(cfg.maxGrid), MinGrid: uint32(c.minGrid),
		TimeoutNs: int64(cfg.timeout), StageBytes: c.stageBytes, CEMin: cfg.ceMin,
		LLTwoMax: cfg.llTwoMax, LLTwoFrom: uint8(cfg.llTwoFrom),
		LLTwoBcastMax: cfg.llTwoBcastMax, LLTwoBcastFrom: uint8(cfg.llTwoBcastFrom),
		LLLines: c.llLines,
		RingMin: cfg.ringMin, RingBytes: cfg.ringBytes, RingMinFrom: uint8(cfg.ringMinFrom), RingBytesFrom: uint8(cfg.ringBytesFrom),
		PullMin: cfg.pullMin, PullFrom: uint8(cfg.pullFrom),
	}
}

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// encode is the record as sent: w, or for a process that failed, the
// header and its error message.
func (w wireConfig) encode(failed error) []byte {
	if failed != nil {
		w = wireConfig{Magic: wireMagic, Version: wireVersion, Status: wireFailed}
	}
	b, err := binary.Append(nil, binary.LittleEndian, &w)
	if err != nil {
		panic(err) // a fixed-size struct always encodes
	}
	if failed != nil {
		msg := failed.Error()
		if len(msg) > maxFailMsg {
			msg = msg[:maxFailMsg] + "..."
		}
		b = append(b, msg...)
	}
	return b
}

// decodeWire reads a record; msg is a failed rank's error message.
func decodeWire(b []byte) (w wireConfig, msg string, err error) {
	n, err := binary.Decode(b, binary.LittleEndian, &w)
	if err != nil || w.Magic != wireMagic {
		return w, "", fmt.Errorf("%d bytes that are not a collectives configuration (did that process call another collective of the team's bootstrap instead of collectives.New?)", len(b))
	}
	if w.Version != wireVersion {
		return w, "", fmt.Errorf("a configuration of version %d, this process's is version %d: the processes run different builds of package collectives", w.Version, wireVersion)
	}
	switch w.Status {
	case wireOK:
		if n != len(b) {
			return w, "", fmt.Errorf("%d bytes after its configuration", len(b)-n)
		}
	case wireFailed:
		msg = string(b[n:])
	default:
		return w, "", fmt.Errorf("a configuration with status %d", w.Status)
	}
	return w, msg, nil
}

// agree all-gathers this process's outcome of prepare (local: its error)
// and configuration, and returns the verdict every rank reaches: local
// itself when this process failed, a team.PeerError per rank that failed,
// or a *ConfigMismatchError.
func (c *Comm) agree(ctx context.Context, local error) error {
	var w wireConfig
	if local == nil {
		w = c.wire()
	}
	all, err := c.t.AllGather(ctx, w.encode(local))
	if err != nil {
		if errors.Is(err, team.ErrClosed) && errors.Is(local, team.ErrClosed) {
			return local // one cause, said once
		}
		err = fmt.Errorf("collectives: New: agreeing on the configuration with the other ranks: %w", err)
		if local != nil {
			return errors.Join(local, err)
		}
		return err
	}
	if local != nil {
		return local
	}
	return verdict(all, c.size)
}

// verdict compares every rank's record (indexed by rank).
func verdict(all [][]byte, size int) error {
	ws := make([]wireConfig, len(all))
	var bad, failed []error
	for r, b := range all {
		w, msg, err := decodeWire(b)
		switch {
		case err != nil:
			bad = append(bad, fmt.Errorf("collectives: New: rank %d sent %w", r, err))
		case w.Status == wireFailed:
			failed = append(failed, &team.PeerError{Rank: r, Step: stepNew, Msg: msg})
		case int(w.Size) != size:
			bad = append(bad, fmt.Errorf("collectives: New: rank %d runs a team of %d ranks, this one of %d", r, w.Size, size))
		}
		ws[r] = w
	}
	if len(failed) > 0 || len(bad) > 0 {
		if len(failed) > 0 {
			failed[0] = fmt.Errorf("collectives: New: %w", failed[0])
		}
		return errors.Join(append(failed, bad...)...)
	}
	var diffs []SettingMismatch
	for _, s := range wireSettings {
		if s.derived && len(diffs) > 0 {
			continue // follows from a mismatch already named
		}
		differ := false
		for _, w := range ws[1:] {
			differ = differ || s.value(&w) != s.value(&ws[0])
		}
		if !differ {
			continue
		}
		d := SettingMismatch{Setting: s.name}
		for r := range ws {
			d.Values = append(d.Values, RankValue{Rank: r, Value: s.format(&ws[r]), Source: s.source(&ws[r])})
		}
		diffs = append(diffs, d)
	}
	if len(diffs) > 0 {
		return &ConfigMismatchError{Settings: diffs}
	}
	return nil
}

// wireSetting is a setting every rank must agree on: the value compared,
// how it reads in an error, and where it came from.
type wireSetting struct {
	name   string
	value  func(w *wireConfig) uint64
	format func(w *wireConfig) string
	source func(w *wireConfig) string
	// derived: it follows from the settings before it, and is named only
	// where they agree (the LL area also on the workspace).
	derived bool
}

// sourceName says where a value came from: "option WithLLMax", "env
// NVLS_LL_MAX" or "default".
func sourceName(s uint8, option, env string) string {
	switch source(s) {
	case fromOption:
		return "option " + option
	case fromEnv:
		return "env " + env
	}
	return "default"
}

var wireSettings = []wireSetting{
	{
		name:   "kernel flavor",
		value:  func(w *wireConfig) uint64 { return uint64(w.Flavor) },
		format: func(w *wireConfig) string { return kernels.Flavor(w.Flavor).String() },
		source: func(*wireConfig) string { return "the team's transport" },
	},
	{
		name:  "LL max",
		value: func(w *wireConfig) uint64 { return w.LLMax },
		format: func(w *wireConfig) string {
			switch {
			case w.LLMax != 0:
				return fmt.Sprintf("%d bytes", w.LLMax)
			case w.LLAsked != 0 && w.PTXHasLL == 0:
				return fmt.Sprintf("0 (LL off: the loaded PTX has no LL kernels, %d bytes asked)", w.LLAsked)
			}
			return "0 (LL off)"
		},
		source: func(w *wireConfig) string { return sourceName(w.LLFrom, "WithLLMax", EnvLLMax) },
	},
	{
		name:   "one-shot max",
		value:  func(w *wireConfig) uint64 { return w.OneShotMax },
		format: func(w *wireConfig) string { return fmt.Sprintf("%d bytes", w.OneShotMax) },
		source: func(w *wireConfig) string { return sourceName(w.OneShotFrom, "WithOneShotMax", EnvOneShotMax) },
	},
	{
		name:  "max grid",
		value: func(w *wireConfig) uint64 { return uint64(w.MaxGrid) },
		format: func(w *wireConfig) string {
			if source(w.GridFrom) != fromDefault && w.GridAsked != w.MaxGrid {
				return fmt.Sprintf("%d blocks (clamped from %d)", w.MaxGrid, w.GridAsked)
			}
			return fmt.Sprintf("%d blocks", w.MaxGrid)
		},
		source: func(w *wireConfig) string { return sourceName(w.GridFrom, "WithMaxGrid", EnvGrid) },
	},
	{
		name:   "min grid",
		value:  func(w *wireConfig) uint64 { return uint64(w.MinGrid) },
		format: func(w *wireConfig) string { return fmt.Sprintf("%d blocks", w.MinGrid) },
		source: func(w *wireConfig) string { return sourceName(w.MinGridFrom, "WithMinGrid", EnvMinGrid) },
	},
	{
		name:   "timeout",
		value:  func(w *wireConfig) uint64 { return uint64(w.TimeoutNs) },
		format: func(w *wireConfig) string { return time.Duration(w.TimeoutNs).String() },
		source: func(w *wireConfig) string { return sourceName(w.TimeoutFrom, "WithTimeout", EnvTimeout) },
	},
	{
		name:   "copy-engine min",
		value:  func(w *wireConfig) uint64 { return w.CEMin },
		format: func(w *wireConfig) string { return fmt.Sprintf("%d bytes", w.CEMin) },
		source: func(w *wireConfig) string { return sourceName(w.CEFrom, "WithCopyEngineMin", EnvCopyEngineMin) },
	},
	{
		name:   "LL two-step max",
		value:  func(w *wireConfig) uint64 { return w.LLTwoMax },
		format: func(w *wireConfig) string { return fmt.Sprintf("%d bytes", w.LLTwoMax) },
		source: func(w *wireConfig) string { return sourceName(w.LLTwoFrom, "WithLLTwoMax", EnvLLTwoMax) },
	},
	{
		name:   "LL two-step broadcast max",
		value:  func(w *wireConfig) uint64 { return w.LLTwoBcastMax },
		format: func(w *wireConfig) string { return fmt.Sprintf("%d bytes", w.LLTwoBcastMax) },
		source: func(w *wireConfig) string {
			return sourceName(w.LLTwoBcastFrom, "WithLLTwoBcastMax", EnvLLTwoBcastMax)
		},
	},
	{
		name:   "stage bytes",
		value:  func(w *wireConfig) uint64 { return w.StageBytes },
		format: func(w *wireConfig) string { return fmt.Sprintf("%d bytes", w.StageBytes) },
		source: func(w *wireConfig) string { return sourceName(w.StageFrom, "WithStageBytes", EnvStageBytes) },
	},
	{
		name:   "ring min",
		value:  func(w *wireConfig) uint64 { return w.RingMin },
		format: func(w *wireConfig) string { return fmt.Sprintf("%d bytes", w.RingMin) },
		source: func(w *wireConfig) string { return sourceName(w.RingMinFrom, "WithRingMin", EnvRingMin) },
	},
	{
		name:   "ring bytes",
		value:  func(w *wireConfig) uint64 { return w.RingBytes },
		format: func(w *wireConfig) string { return fmt.Sprintf("%d bytes", w.RingBytes) },
		source: func(w *wireConfig) string { return sourceName(w.RingBytesFrom, "WithRingBytes", EnvRingBytes) },
	},
	{
		name:   "reduce pull min",
		value:  func(w *wireConfig) uint64 { return w.PullMin },
		format: func(w *wireConfig) string { return fmt.Sprintf("%d bytes", w.PullMin) },
		source: func(w *wireConfig) string { return sourceName(w.PullFrom, "WithReducePullMin", EnvReducePullMin) },
	},
	{
		name:    "LL area",
		value:   func(w *wireConfig) uint64 { return w.LLLines },
		format:  func(w *wireConfig) string { return fmt.Sprintf("%d lines a slot", w.LLLines) },
		source:  func(*wireConfig) string { return "the LL limits and the workspace" },
		derived: true,
	},
}
