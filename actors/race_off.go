//go:build !race

package actors

// raceBuild is true under the race detector (see race_on.go).
const raceBuild = false
