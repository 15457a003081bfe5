package mesh

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
)

// SealOverhead is what Seal adds to a frame: the nonce and the GCM tag.
const SealOverhead = sealNonceBytes + sealTagBytes

const (
	sealNonceBytes = 12
	sealTagBytes   = 16
	// sealKeyInfo separates the hint key from memberlist's gossip key, which
	// is the raw secret: the same secret never keys two protocols.
	sealKeyInfo = "queen-node hint key v1"
)

// Sealer encrypts and authenticates hint frames with AES-256-GCM under a key
// derived from QUEEN_MESH_SECRET. A nil *Sealer is the open mesh: Seal and
// Open pass frames through unchanged, so callers need no branch.
//
// Nonces are random, which is safe for about 2^32 frames per secret across
// the whole cluster (the GCM birthday bound); rotate the secret long before.
// A captured frame can be replayed, which is harmless: a hint only says
// "look at this partition", and a needless look costs one empty claim.
type Sealer struct {
	aead cipher.AEAD
}

// NewSealer derives the hint key from secret (16, 24 or 32 bytes) with
// HKDF-SHA256 and returns a Sealer using it. An empty secret returns a nil
// Sealer and no error: the open mesh, where frames travel as plaintext.
func NewSealer(secret []byte) (*Sealer, error) {
	switch len(secret) {
	case 0:
		return nil, nil
	case 16, 24, 32:
	default:
		return nil, fmt.Errorf("mesh: secret must be 16, 24 or 32 bytes, got %d", len(secret))
	}
	key, err := hkdf.Key(sha256.New, secret, nil, sealKeyInfo, 32)
	if err != nil {
		return nil, fmt.Errorf("mesh: derive hint key: %w", err)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("mesh: hint cipher: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("mesh: hint cipher: %w", err)
	}
	return &Sealer{aead: aead}, nil
}

// Seal returns nonce || AES-GCM(frame), len(frame)+SealOverhead bytes. On a
// nil Sealer it returns frame itself.
func (s *Sealer) Seal(frame []byte) []byte {
	if s == nil {
		return frame
	}
	out := make([]byte, sealNonceBytes, len(frame)+SealOverhead)
	// crypto/rand.Read never fails (it crashes the program instead).
	_, _ = rand.Read(out)
	return s.aead.Seal(out, out, frame, nil)
}

// Open authenticates and decrypts what Seal produced. Any failure (too short,
// larger than a sealed MaxFrameBytes frame, wrong key, a changed byte) is an
// error wrapping ErrBadFrame. On a nil Sealer it returns sealed itself.
func (s *Sealer) Open(sealed []byte) ([]byte, error) {
	if s == nil {
		return sealed, nil
	}
	if len(sealed) < SealOverhead {
		return nil, fmt.Errorf("%w: sealed frame of %d bytes is shorter than %d", ErrBadFrame, len(sealed), SealOverhead)
	}
	if len(sealed) > MaxFrameBytes+SealOverhead {
		return nil, fmt.Errorf("%w: sealed frame of %d bytes exceeds %d", ErrBadFrame, len(sealed), MaxFrameBytes+SealOverhead)
	}
	frame, err := s.aead.Open(nil, sealed[:sealNonceBytes], sealed[sealNonceBytes:], nil)
	if err != nil {
		// The GCM error says nothing more than "authentication failed".
		return nil, fmt.Errorf("%w: not authenticated (wrong secret or tampered)", ErrBadFrame)
	}
	return frame, nil
}
