package forward

// For answer_node_test.go (package forward_test), which reads the answers
// of a real node: the internal tests cannot import internal/nodetest,
// whose node imports this package.
type (
	PeerResult = peerResult
	PeerAck    = peerAck
)

var (
	FastPeerResults = fastPeerResults
	FastPeerAcks    = fastPeerAcks
)
