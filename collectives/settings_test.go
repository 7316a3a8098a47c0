package collectives_test

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/nvls-go/nvls/collectives"
	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/simnode"
	"github.com/nvls-go/nvls/team"
)

// Comm.Settings says what a Comm runs with: here 2 ranks on the unicast
// transport, the LL limit and the ring set by options, the rest from
// the defaults for 2 ranks.
func ExampleComm_Settings() {
	node := simnode.New(simnode.Config{Devices: 2})
	defer node.Close()
	ctx := context.Background()
	t, err := team.New(ctx, node, []cuda.Device{0, 1}, team.WithTransport(team.Unicast),
		team.WithWorkspaceSize(64<<20), team.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer t.Close()
	c, err := collectives.New(t, collectives.WithLLMax(64<<10), collectives.WithRingMin(64<<20), collectives.WithRingBytes(8<<20))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	s := c.Settings()
	fmt.Println(s.LLMax, s.RingMin, s.RingBytes, s.CopyEngineMin == collectives.DefaultCopyEngineMin, s.StageBytes == collectives.DefaultStageBytes)
	// Output:
	// 65536 67108864 8388608 true true
}
