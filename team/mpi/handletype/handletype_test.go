//go:build linux

package handletype

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const procWithIMEX = `Character devices:
  1 mem
  4 /dev/vc/0
195 nvidia
234 nvidia-caps-imex-channels
509 nvidia-uvm

Block devices:
  8 sd
234 nvidia-caps-imex-channels-bogus
`

const procWithout = `Character devices:
  1 mem
195 nvidia

Block devices:
  8 sd
`

// fakeHost lays out a /proc/devices and a channel directory.
func fakeHost(t *testing.T, proc string, channels map[string]string) Probe {
	t.Helper()
	dir := t.TempDir()
	pd := filepath.Join(dir, "devices")
	require.NoError(t, os.WriteFile(pd, []byte(proc), 0o644))
	cd := filepath.Join(dir, "channels")
	if channels != nil {
		require.NoError(t, os.Mkdir(cd, 0o755))
	}
	for name, target := range channels {
		p := filepath.Join(cd, name)
		if target == "" {
			require.NoError(t, os.WriteFile(p, nil, 0o600))
		} else {
			require.NoError(t, os.Symlink(target, p))
		}
	}
	return Probe{ProcDevices: pd, ChannelDir: cd}
}

func TestMajor(t *testing.T) {
	m, err := fakeHost(t, procWithIMEX, nil).Major()
	require.NoError(t, err)
	assert.Equal(t, uint32(234), m)

	_, err = fakeHost(t, procWithout, nil).Major()
	require.ErrorIs(t, err, ErrNoIMEX)
	assert.Contains(t, err.Error(), "does not list nvidia-caps-imex-channels")

	// Listed only among block devices: not a channel.
	_, err = fakeHost(t, "Character devices:\n  1 mem\nBlock devices:\n234 nvidia-caps-imex-channels\n", nil).Major()
	assert.ErrorIs(t, err, ErrNoIMEX)

	_, err = Probe{ProcDevices: filepath.Join(t.TempDir(), "none")}.Major()
	assert.ErrorIs(t, err, os.ErrNotExist)
	assert.ErrorIs(t, err, ErrNoIMEX)
}

func TestChannel(t *testing.T) {
	// A plain file stands in for a channel node that opens.
	p := fakeHost(t, procWithIMEX, map[string]string{"channel3": "", "channel0": "", "other": ""})
	ch, err := p.Channel()
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(p.ChannelDir, "channel0"), ch)

	// channel0 dangling: the next channel by number.
	p = fakeHost(t, procWithIMEX, map[string]string{"channel0": "/nonexistent/x", "channel12": "", "channel2": ""})
	ch, err = p.Channel()
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(p.ChannelDir, "channel2"), ch)

	// A character device with another major (/dev/null is 1:3) is not a channel.
	p = fakeHost(t, procWithIMEX, map[string]string{"channel0": "/dev/null"})
	_, err = p.Channel()
	require.ErrorIs(t, err, ErrNoIMEX)
	assert.Contains(t, err.Error(), "major 1, but /proc/devices lists nvidia-caps-imex-channels as 234")
	// ...and with the right major it is.
	p = fakeHost(t, "Character devices:\n  1 nvidia-caps-imex-channels\n", map[string]string{"channel0": "/dev/null"})
	ch, err = p.Channel()
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(p.ChannelDir, "channel0"), ch)

	p = fakeHost(t, procWithIMEX, nil)
	_, err = p.Channel()
	require.ErrorIs(t, err, ErrNoIMEX)
	assert.Contains(t, err.Error(), "no channel nodes created")

	p = fakeHost(t, procWithIMEX, map[string]string{"other": ""})
	_, err = p.Channel()
	require.ErrorIs(t, err, ErrNoIMEX)
	assert.Contains(t, err.Error(), "holds no channelN node")

	p = fakeHost(t, procWithout, map[string]string{"channel0": ""})
	_, err = p.Channel()
	assert.ErrorIs(t, err, ErrNoIMEX)
}

func TestDevMajor(t *testing.T) {
	// makedev(major, minor) as glibc builds it.
	mk := func(maj, min uint64) uint64 {
		return (maj&0xfff)<<8 | (maj&^0xfff)<<32 | (min & 0xff) | (min&^0xff)<<12
	}
	for _, m := range []uint64{0, 1, 234, 509, 4095, 4096, 70000} {
		assert.Equal(t, uint32(m), devMajor(mk(m, 77)), "major %d", m)
	}
}

func TestCheckOnSim(t *testing.T) {
	host := fakeHost(t, procWithIMEX, map[string]string{"channel0": ""})

	t.Run("fabric", func(t *testing.T) {
		n := sim.New(sim.Config{Devices: 2, Fabric: true})
		defer n.Close()
		require.NoError(t, n.Init())
		s := Check(n, 1, host)
		assert.True(t, s.OK, s.Reason)
		assert.Equal(t, filepath.Join(host.ChannelDir, "channel0"), s.Channel)
		assert.Contains(t, s.Reason, "device 1 supports fabric handles")
		assert.Len(t, n.CallsOf("cuMemExportToShareableHandle"), 1, "one trial export")
		assert.Empty(t, n.CallsOf("cuMulticastCreate"))
		assert.NoError(t, n.CheckNoLeaks(), "the trial allocation and context reference are released")
	})
	t.Run("no-attribute", func(t *testing.T) {
		n := sim.New(sim.Config{Devices: 2})
		defer n.Close()
		require.NoError(t, n.Init())
		s := Check(n, 0, host)
		assert.False(t, s.OK)
		assert.Equal(t, "device 0 reports no fabric handle support", s.Reason)
		assert.Empty(t, n.CallsOf("cuMemCreate"))
	})
	t.Run("no-imex", func(t *testing.T) {
		n := sim.New(sim.Config{Devices: 2, Fabric: true})
		defer n.Close()
		require.NoError(t, n.Init())
		s := Check(n, 0, fakeHost(t, procWithout, nil))
		assert.False(t, s.OK)
		assert.Contains(t, s.Reason, "supports fabric handles, but handletype: no usable IMEX channel")
	})
	t.Run("export-fails", func(t *testing.T) {
		n := sim.New(sim.Config{Devices: 2, Fabric: true})
		defer n.Close()
		require.NoError(t, n.Init())
		n.FailAt("cuMemExportToShareableHandle", 1, cuda.ErrorNotPermitted)
		s := Check(n, 0, host)
		assert.False(t, s.OK)
		assert.Contains(t, s.Reason, "trial export failed")
		assert.Contains(t, s.Reason, "CUDA_ERROR_NOT_PERMITTED")
		assert.NoError(t, n.CheckNoLeaks())
	})
	t.Run("not-permitted", func(t *testing.T) {
		// The H100 of the differential run of 2026-11-25: the attribute
		// reports fabric handles, creating such memory is not permitted.
		n := sim.New(sim.Config{Devices: 2, Fabric: true, FabricNotPermitted: true})
		defer n.Close()
		require.NoError(t, n.Init())
		s := Check(n, 1, host)
		assert.False(t, s.OK)
		assert.Contains(t, s.Reason, "device 1 reports fabric handles and "+filepath.Join(host.ChannelDir, "channel0")+" opens, but the driver does not permit memory exportable as fabric handles")
		assert.Contains(t, s.Reason, "CUDA_ERROR_NOT_PERMITTED")
		assert.Len(t, n.CallsOf("cuMemCreate"), 1)
		assert.Empty(t, n.CallsOf("cuMemExportToShareableHandle"))
		assert.NoError(t, n.CheckNoLeaks(), "the context reference is released")
		// Every rank falls back to POSIX file descriptors, saying why.
		ht, why, err := Decide([]Support{s, s}, 1)
		require.NoError(t, err)
		assert.Equal(t, cuda.HandlePosixFD, ht)
		assert.Equal(t, "rank 0: "+s.Reason, why)
	})
	t.Run("no-trial", func(t *testing.T) {
		n := sim.New(sim.Config{Devices: 2, Fabric: true})
		defer n.Close()
		require.NoError(t, n.Init())
		p := host
		p.NoTrialExport = true
		s := Check(n, 0, p)
		assert.True(t, s.OK, s.Reason)
		assert.Empty(t, n.CallsOf("cuMemCreate"))
	})
}

func TestDecide(t *testing.T) {
	ok := Support{OK: true, Channel: "/dev/x/channel0", Reason: "fine"}
	no := Support{Reason: "device 2 reports no fabric handle support"}
	ht, why, err := Decide([]Support{ok, ok, ok}, 1)
	require.NoError(t, err)
	assert.Equal(t, cuda.HandleFabric, ht)
	assert.Contains(t, why, "/dev/x/channel0")

	ht, why, err = Decide([]Support{ok, ok, no, no}, 1)
	require.NoError(t, err)
	assert.Equal(t, cuda.HandlePosixFD, ht)
	assert.Equal(t, "rank 2: device 2 reports no fabric handle support", why)

	_, _, err = Decide([]Support{ok, no}, 2)
	require.ErrorIs(t, err, ErrMultiNode)
	assert.Contains(t, err.Error(), "rank 1")
	ht, _, err = Decide([]Support{ok, ok}, 2)
	require.NoError(t, err)
	assert.Equal(t, cuda.HandleFabric, ht)

	_, _, err = Decide(nil, 1)
	assert.Error(t, err)
}

func TestSupportWire(t *testing.T) {
	for range 10 {
		b := make([]byte, 40)
		_, err := rand.Read(b)
		require.NoError(t, err)
		in := Support{OK: b[0]&1 == 1, Channel: hex.EncodeToString(b[1 : 1+b[1]%16]), Reason: hex.EncodeToString(b[20:])}
		enc, err := in.MarshalBinary()
		require.NoError(t, err)
		var out Support
		require.NoError(t, out.UnmarshalBinary(enc))
		assert.Equal(t, in, out)
	}
	var s Support
	assert.Error(t, s.UnmarshalBinary(nil))
	assert.Error(t, s.UnmarshalBinary([]byte{2, 0}))
	assert.Error(t, s.UnmarshalBinary([]byte{1, 9, 'a'}))
}

func FuzzSupportWire(f *testing.F) {
	enc, _ := Support{OK: true, Channel: "c", Reason: "r"}.MarshalBinary()
	f.Add(enc)
	f.Add([]byte{0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		var s Support
		if s.UnmarshalBinary(b) != nil {
			return
		}
		again, err := s.MarshalBinary()
		require.NoError(t, err)
		var s2 Support
		require.NoError(t, s2.UnmarshalBinary(again))
		require.Equal(t, s, s2)
	})
}
