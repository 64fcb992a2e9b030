package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/troupe-ml/troupe/internal/pki"
)

type certsFlags struct {
	out    string
	nodes  string
	hosts  string
	caName string
	valid  time.Duration
	json   bool
}

func newCertsCmd() *cobra.Command {
	var f certsFlags
	cmd := &cobra.Command{
		Use:   "certs --out DIR --nodes N[,N…]",
		Short: "Make a cluster CA and node certificates for TLS between agents (tests and small clusters)",
		Long: `troupe certs writes, under --out, a cluster CA (ca.pem, and ca-key.pem, which the nodes do not
need) and for each node of --nodes its certificate and key (NAME.pem, NAME-key.pem), ECDSA P-256,
for both client and server use. Give each agent --tls-ca DIR/ca.pem --tls-cert DIR/NAME.pem
--tls-key DIR/NAME-key.pem. When DIR already holds a CA, the new node certificates are signed by it,
so a node can be added later. Nothing is overwritten: a file that exists is an error, and nothing
is written then. Keys are written with mode 0600.

Peers check that a certificate chains to the cluster CA, not its names: nodes come and go on
addresses no one knows in advance. --hosts adds DNS names or IP addresses to every certificate for
other tools. For a production cluster, issue the certificates from your own CA (cert-manager,
Vault): any ECDSA or RSA certificate with the client and server usages works.`,
		Example: `  troupe certs --out certs --nodes n1,n2,n3
  troupe certs --out certs --nodes n4          # one more node, same CA`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runCerts(cmd.OutOrStdout(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.out, "out", "", "directory to write into (created if missing)")
	fl.StringVar(&f.nodes, "nodes", "", "comma-separated node names (the agents' --name)")
	fl.StringVar(&f.hosts, "hosts", "", "comma-separated DNS names or IP addresses added to every node certificate")
	fl.StringVar(&f.caName, "ca-name", "troupe cluster CA", "the CA's common name (when a new CA is made)")
	fl.DurationVar(&f.valid, "valid", 365*24*time.Hour, "how long the certificates are valid")
	fl.BoolVar(&f.json, "json", false, "print what was written as JSON")
	return cmd
}

func init() { rootCmd.AddCommand(newCertsCmd()) }

var certNameRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// certsResult is what troupe certs wrote.
type certsResult struct {
	CA     string      `json:"ca"`
	CAKey  string      `json:"ca_key"`
	NewCA  bool        `json:"new_ca"`
	Nodes  []certsNode `json:"nodes"`
	Expiry time.Time   `json:"not_after"`
}

type certsNode struct {
	Name string `json:"name"`
	Cert string `json:"cert"`
	Key  string `json:"key"`
}

func runCerts(w io.Writer, f certsFlags) error {
	if f.out == "" || f.nodes == "" {
		return fmt.Errorf("%w: --out and --nodes are needed", errUsage)
	}
	if f.valid <= 0 {
		return fmt.Errorf("%w: --valid %v: want a positive duration", errUsage, f.valid)
	}
	names := strings.Split(f.nodes, ",")
	seen := map[string]bool{}
	for _, n := range names {
		if !certNameRE.MatchString(n) || n == "ca" || seen[n] {
			return fmt.Errorf("%w: --nodes: %q is not a node name (1 to 64 letters, digits, '.', '_', '-'; not \"ca\"; each once)", errUsage, n)
		}
		seen[n] = true
	}
	var hosts []string
	if f.hosts != "" {
		hosts = strings.Split(f.hosts, ",")
	}
	res := certsResult{CA: filepath.Join(f.out, "ca.pem"), CAKey: filepath.Join(f.out, "ca-key.pem")}
	files := map[string][]byte{}
	ca, err := pki.LoadCA(res.CA, res.CAKey)
	switch {
	case err == nil:
	case errors.Is(err, fs.ErrNotExist) && !exists(res.CA) && !exists(res.CAKey):
		if ca, err = pki.NewCA(f.caName, f.valid); err != nil {
			return err
		}
		res.NewCA = true
		files[res.CA] = ca.CertPEM()
		if files[res.CAKey], err = ca.KeyPEM(); err != nil {
			return err
		}
	default:
		return fmt.Errorf("the CA under %s: %w", f.out, err)
	}
	for _, n := range names {
		cert, key, err := ca.Issue(n, hosts, f.valid)
		if err != nil {
			return err
		}
		nf := certsNode{Name: n, Cert: filepath.Join(f.out, n+".pem"), Key: filepath.Join(f.out, n+"-key.pem")}
		files[nf.Cert], files[nf.Key] = cert, key
		res.Nodes = append(res.Nodes, nf)
	}
	for p := range files {
		if exists(p) {
			return fmt.Errorf("%s exists: troupe certs does not overwrite (nothing was written)", p)
		}
	}
	if err := os.MkdirAll(f.out, 0o700); err != nil {
		return err
	}
	for p, b := range files {
		mode := fs.FileMode(0o644)
		if strings.HasSuffix(p, "-key.pem") {
			mode = 0o600
		}
		if err := writeNew(p, b, mode); err != nil {
			return err
		}
	}
	res.Expiry = ca.Cert.NotAfter.UTC()
	if f.json {
		return json.NewEncoder(w).Encode(res)
	}
	if res.NewCA {
		fmt.Fprintf(w, "CA %q: %s (key %s: keep it off the nodes)\n", ca.Cert.Subject.CommonName, res.CA, res.CAKey)
	} else {
		fmt.Fprintf(w, "CA %q: %s (existing)\n", ca.Cert.Subject.CommonName, res.CA)
	}
	for _, n := range res.Nodes {
		fmt.Fprintf(w, "node %s: --tls-ca %s --tls-cert %s --tls-key %s\n", n.Name, res.CA, n.Cert, n.Key)
	}
	return nil
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// writeNew writes a file that must not exist yet, and syncs it.
func writeNew(p string, b []byte, mode fs.FileMode) error {
	fh, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := fh.Write(b); err != nil {
		fh.Close()
		return err
	}
	if err := fh.Sync(); err != nil {
		fh.Close()
		return err
	}
	return fh.Close()
}
