package simkern

import (
	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/kabi"
)

// Failure (nvls.h: record_status, record_timeout, record_abort,
// team_failed, nvls_enter): a wait that runs out of time records the own
// status word (CAS from 0; the winner copies it to params.host_status) and
// marks the team failed on every rank (the team-failed word, CAS from 0);
// a kernel that finds the own team-failed word set, at entry or while it
// waits, records that it gave up (never over an earlier code) and returns.

// failedCheckEvery is how many polls of a barrier wait pass between two
// looks at the team-failed word (nvls.h: barrier_wait, every 64).
const failedCheckEvery = 64

// teamFailed is the own team-failed word (0: no rank failed).
func (k *kern) teamFailed() (uint64, error) {
	var b [8]byte
	if err := k.mem.Load(cuda.DevicePtr(k.own+kabi.FailedOffset), b[:]); err != nil {
		return 0, err
	}
	return le.Uint64(b[:]), nil
}

// recordStatus writes code into the own status word if it is 0 and then,
// having won it, into the host's copy (a plain 8-byte store, as on the
// GPU), after diag (a mismatch: every rank's arrival word) at
// kabi.HostDiagOffset.
func (k *kern) recordStatus(code uint64, diag ...uint64) error {
	old, err := k.mem.AtomicCASU64(cuda.DevicePtr(k.own+kabi.StatusOffset), 0, code)
	if err != nil || old != 0 || k.p.HostStatus == 0 {
		return err
	}
	var b [8]byte
	for r, w := range diag {
		le.PutUint64(b[:], w)
		if err := k.mem.Store(cuda.DevicePtr(k.p.HostStatus+kabi.HostDiagOffset+8*uint64(r)), b[:]); err != nil {
			return err
		}
	}
	le.PutUint64(b[:], code)
	return k.mem.Store(cuda.DevicePtr(k.p.HostStatus), b[:])
}

// failTeam puts code, with this rank, into every rank's team-failed word
// (CAS from 0).
func (k *kern) failTeam(code uint64) error {
	failed := kabi.FailedWord(code, int(k.p.Rank))
	for r := uint32(0); r < k.p.NRanks; r++ {
		if _, err := k.mem.AtomicCASU64(cuda.DevicePtr(k.p.UC[r]+kabi.FailedOffset), 0, failed); err != nil {
			return err
		}
	}
	return nil
}

// recordTimeout: the block's wait in phase ran out of time.
func (k *kern) recordTimeout(phase uint32) error {
	code := kabi.TimeoutStatus(k.p.Opcode, phase, uint32(k.block))
	if err := k.recordStatus(code); err != nil {
		return err
	}
	return k.failTeam(code)
}

// recordMismatch: the ranks' arrival words (words, index = rank; 0 where
// not seen) disagree.
func (k *kern) recordMismatch(words []uint64) error {
	code := kabi.MismatchStatus(k.p.Opcode, uint32(k.block))
	if err := k.recordStatus(code, words...); err != nil {
		return err
	}
	return k.failTeam(code)
}

// recordAbort: the block gave up in phase because the team-failed word
// was failed.
func (k *kern) recordAbort(phase uint32, failed uint64) error {
	return k.recordStatus(kabi.AbortStatus(k.p.Opcode, phase, uint32(k.block), failed))
}

// checkFailed looks at the team-failed word and, when it is set, records
// that the block gave up in phase: it returns true then.
func (k *kern) checkFailed(phase uint32) (bool, error) {
	f, err := k.teamFailed()
	if err != nil || f == 0 {
		return false, err
	}
	return true, k.recordAbort(phase, f)
}

// enter is nvls_enter: false (recorded) when the team has failed.
func (k *kern) enter() (bool, error) {
	failed, err := k.checkFailed(kabi.PhaseEntry)
	return !failed, err
}
