package team

import (
	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/internal/teamlink"
)

// What package collectives needs of a team beyond the public API goes
// through internal/teamlink, so that it is not part of team's API.
func init() { teamlink.Register(func(x any) teamlink.Team { return link{x.(*Team)} }) }

// link is a *Team as internal/teamlink's Team (pointer-shaped: an
// interface holds it without allocating).
type link struct{ t *Team }

func (l link) UCBases(localRank int) [kabi.MaxRanks]cuda.DevicePtr { return l.t.ucBases(localRank) }
func (l link) MCBase(localRank int) cuda.DevicePtr                 { return l.t.mcBaseOf(localRank) }
func (l link) Layout() kabi.Layout                                 { return l.t.layout() }
func (l link) MaxRanksOnDevice() int                               { return l.t.maxRanksOnDevice() }
func (l link) OneContext() bool                                    { return l.t.oneContext() }
func (l link) RunHere(job teamlink.Job) error                      { return l.t.runHere(job) }
func (l link) Fail(err error)                                      { l.t.markFailed(err) }

func (l link) BufferAt(off, n uint64) (bufOff, bufSize uint64, ok bool) {
	b, ok := l.t.bufferAt(off, n)
	return b.off, b.size, ok
}
