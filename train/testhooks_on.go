//go:build troupetesthooks

package train

// A binary built with -tags troupetesthooks reads the test hooks from its
// environment (testHooks).
func init() { testHooks = envTestHooks }
