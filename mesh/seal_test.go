package mesh

import (
	"bytes"
	"errors"
	"testing"
)

func sealMust(t *testing.T, secret string) *Sealer {
	t.Helper()
	s, err := NewSealer([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

const sealSecret = "0123456789abcdef0123456789abcdef"

func TestSealRoundTrip(t *testing.T) {
	for _, secret := range []string{sealSecret[:16], sealSecret[:24], sealSecret} {
		s := sealMust(t, secret)
		for _, frame := range [][]byte{{}, frameValid(), bytes.Repeat([]byte{7}, MaxFrameBytes)} {
			sealed := s.Seal(frame)
			if len(sealed) != len(frame)+SealOverhead {
				t.Fatalf("sealed %d bytes, want %d", len(sealed), len(frame)+SealOverhead)
			}
			if len(frame) > 16 && bytes.Contains(sealed, frame[2:]) {
				t.Fatal("plaintext visible in the sealed frame")
			}
			got, err := s.Open(sealed)
			if err != nil || !bytes.Equal(got, frame) {
				t.Fatalf("Open = %d bytes, %v", len(got), err)
			}
		}
	}
}

// Nonces are random: sealing the same frame twice gives different bytes.
func TestSealFreshNonce(t *testing.T) {
	s := sealMust(t, sealSecret)
	if bytes.Equal(s.Seal(frameValid()), s.Seal(frameValid())) {
		t.Fatal("two seals of one frame are identical")
	}
}

func TestSealBadSecretLength(t *testing.T) {
	for _, n := range []int{1, 15, 17, 31, 33, 64} {
		if _, err := NewSealer(make([]byte, n)); err == nil {
			t.Errorf("NewSealer(%d bytes) accepted", n)
		}
	}
}

func TestSealWrongKeyRejected(t *testing.T) {
	sealed := sealMust(t, sealSecret).Seal(frameValid())
	other := sealMust(t, "fedcba9876543210fedcba9876543210")
	if _, err := other.Open(sealed); !errors.Is(err, ErrBadFrame) {
		t.Fatalf("wrong key: err = %v", err)
	}
	// A secret that is a prefix of the right one derives an unrelated key.
	if _, err := sealMust(t, sealSecret[:16]).Open(sealed); !errors.Is(err, ErrBadFrame) {
		t.Fatalf("shorter secret: err = %v", err)
	}
}

func TestSealTamperedRejected(t *testing.T) {
	s := sealMust(t, sealSecret)
	sealed := s.Seal(frameValid())
	for i := range sealed {
		bad := bytes.Clone(sealed)
		bad[i] ^= 0x01
		if _, err := s.Open(bad); !errors.Is(err, ErrBadFrame) {
			t.Fatalf("flipped byte %d: err = %v", i, err)
		}
	}
	if _, err := s.Open(append(bytes.Clone(sealed), 0)); !errors.Is(err, ErrBadFrame) {
		t.Fatalf("appended byte: err = %v", err)
	}
}

func TestSealTruncatedRejected(t *testing.T) {
	s := sealMust(t, sealSecret)
	sealed := s.Seal(frameValid())
	for n := range len(sealed) {
		if _, err := s.Open(sealed[:n]); !errors.Is(err, ErrBadFrame) {
			t.Fatalf("truncated to %d: err = %v", n, err)
		}
	}
	if _, err := s.Open(make([]byte, MaxFrameBytes+SealOverhead+1)); !errors.Is(err, ErrBadFrame) {
		t.Fatalf("oversized: err = %v", err)
	}
}

// A plaintext frame from an open-mesh peer is refused by a sealed node.
func TestSealRefusesPlaintext(t *testing.T) {
	if _, err := sealMust(t, sealSecret).Open(frameValid()); !errors.Is(err, ErrBadFrame) {
		t.Fatalf("err = %v", err)
	}
}

func TestSealNilPassthrough(t *testing.T) {
	s, err := NewSealer(nil) // no secret: the open mesh
	if s != nil || err != nil {
		t.Fatalf("NewSealer(nil) = %v, %v; want nil, nil", s, err)
	}
	frame := frameValid()
	if got := s.Seal(frame); !bytes.Equal(got, frame) {
		t.Fatal("nil Seal changed the frame")
	}
	got, err := s.Open(frame)
	if err != nil || !bytes.Equal(got, frame) {
		t.Fatalf("nil Open = %v, %v", got, err)
	}
}

func BenchmarkSeal(b *testing.B) {
	s, _ := NewSealer([]byte(sealSecret))
	frame := bytes.Repeat([]byte{1}, 16<<10)
	b.SetBytes(int64(len(frame)))
	for b.Loop() {
		if _, err := s.Open(s.Seal(frame)); err != nil {
			b.Fatal(err)
		}
	}
}
