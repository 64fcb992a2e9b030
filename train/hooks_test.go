package train

// The package's tests set the test hooks from the environment
// (t.Setenv(envStraggler, ...)), as the e2e tests' binary does.
func init() { testHooks = envTestHooks }
