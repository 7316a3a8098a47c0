// Package unicastonly wraps a cuda.Driver so that no cuMulticast* entry
// point can reach the real driver: each one returns ErrMulticastForbidden
// (and reports the call) instead. The GPU tests and the example of
// nvls run on machines whose NVSwitch fabric is shared, where a
// multicast object can take the host down; they use this wrapper besides
// asking the team for the unicast transport.
package unicastonly
