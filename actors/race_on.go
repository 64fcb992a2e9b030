//go:build race

package actors

// raceBuild: the race detector sees no happens-before edge through a socket
// or a shared mapping between processes, so it would flag the data plane's
// writer copying a payload into a peer's shared slot against the rank's
// later reuse of the buffer, which the peer's answer orders (the operation
// completes only after every peer consumed it). Under the detector, Send
// copies the payload first, in the caller's goroutine (see DataPlane.Send),
// unless it lies in registered memory, which the detector does not watch
// (it goes by reference, as without the detector).
const raceBuild = true
