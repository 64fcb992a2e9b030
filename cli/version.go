package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// versionText is what troupe --version prints: the module version, the
// version-control revision it was built from, and the toolchain. bi is
// the binary's build information (nil when there is none).
func versionText(bi *debug.BuildInfo) string {
	version, path, goVersion := "(devel)", "github.com/troupe-ml/troupe", runtime.Version()
	settings := map[string]string{}
	if bi != nil {
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		if bi.Main.Path != "" {
			path = bi.Main.Path
		}
		if bi.GoVersion != "" {
			goVersion = bi.GoVersion
		}
		for _, s := range bi.Settings {
			settings[s.Key] = s.Value
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "troupe %s (%s)\n", version, path)
	if rev := settings["vcs.revision"]; rev != "" {
		fmt.Fprintf(&b, "revision %s", rev)
		if t := settings["vcs.time"]; t != "" {
			fmt.Fprintf(&b, ", committed %s", t)
		}
		if settings["vcs.modified"] == "true" {
			b.WriteString(", with uncommitted changes")
		}
		b.WriteString("\n")
	} else {
		b.WriteString("revision unknown (built without version-control information: go build -buildvcs=true in a checkout records it)\n")
	}
	fmt.Fprintf(&b, "built with %s for %s/%s\n", goVersion, runtime.GOOS, runtime.GOARCH)
	return b.String()
}

func init() {
	bi, _ := debug.ReadBuildInfo()
	rootCmd.Version = versionText(bi)
	rootCmd.SetVersionTemplate("{{.Version}}")
}
