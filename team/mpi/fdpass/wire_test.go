//go:build linux

package fdpass

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHelloRoundTrip(t *testing.T) {
	for range 20 {
		var h hello
		copy(h.Token[:], randBytes(t, TokenSize))
		b := randBytes(t, 17)
		h.From = uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16
		h.To = uint32(b[3]) | uint32(b[4])<<8
		for i := range 8 {
			h.Seq |= uint64(b[5+i]) << (8 * i)
		}
		h.HasFD = b[13]&1 == 1
		got, err := parseHello(h.marshal())
		require.NoError(t, err)
		assert.Equal(t, h, got)
	}
	_, err := parseHello(make([]byte, helloSize-1))
	assert.ErrorIs(t, err, errBadHello)
	b := hello{HasFD: true}.marshal()
	b[56] = 2
	_, err = parseHello(b)
	assert.ErrorIs(t, err, errBadHello)
}

func TestRefusalFrame(t *testing.T) {
	long := string(randBytes(t, 300))
	f := refusal(long)
	require.Len(t, f, 2+255)
	assert.Equal(t, statusRefused, f[0])
	assert.Equal(t, byte(255), f[1])
	assert.Equal(t, long[:255], string(f[2:]))
}

// FuzzParseHello: parsing never panics, and whatever parses marshals back
// to the same bytes.
func FuzzParseHello(f *testing.F) {
	h := hello{From: 1, To: 2, Seq: 3, HasFD: true}
	f.Add(h.marshal())
	f.Add([]byte("NVLSFD01"))
	f.Add(make([]byte, helloSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := parseHello(b)
		if err != nil {
			return
		}
		if string(got.marshal()) != string(b) {
			t.Fatalf("round trip: %x -> %+v -> %x", b, got, got.marshal())
		}
	})
}
