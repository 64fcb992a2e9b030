package kernels

import (
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Options select a device and how much of it to use.
type Options struct {
	// Threads bounds the OS threads one kernel may use; 0 means GOMAXPROCS.
	Threads int
	// Device is the device ordinal for backends with several (GPUs).
	Device int
}

// Factory opens a backend. It returns ErrNoDevice (wrapped) when the device
// is not present on this machine.
type Factory func(Options) (Backend, error)

// DeviceInfo describes one device a backend can open.
type DeviceInfo struct {
	Backend     string `json:"backend"`
	Index       int    `json:"index"`
	Name        string `json:"name"`
	MemoryBytes int64  `json:"memory_bytes"`
	Detail      string `json:"detail,omitempty"`
}

// Lister enumerates a backend's devices.
type Lister func() ([]DeviceInfo, error)

type entry struct {
	open Factory
	list Lister
}

var (
	mu       sync.RWMutex
	registry = map[string]entry{}
)

// Register makes a backend available under name. Backends register in an
// init function; registering a name twice panics.
func Register(name string, open Factory, list Lister) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := registry[name]; dup {
		panic("kernels: backend registered twice: " + name)
	}
	registry[name] = entry{open: open, list: list}
}

// Names lists the registered backends, sorted.
func Names() []string {
	mu.RLock()
	defer mu.RUnlock()
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Open opens the named backend.
func Open(name string, opts Options) (Backend, error) {
	mu.RLock()
	e, ok := registry[name]
	mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w %q (registered: %s)", ErrUnknownBackend, name, strings.Join(Names(), ", "))
	}
	return e.open(opts)
}

// Devices lists the devices of every registered backend. A backend whose
// lister fails is reported in the returned error but does not hide the others.
func Devices() ([]DeviceInfo, error) {
	var out []DeviceInfo
	var errs []string
	for _, n := range Names() {
		mu.RLock()
		e := registry[n]
		mu.RUnlock()
		if e.list == nil {
			continue
		}
		d, err := e.list()
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", n, err))
			continue
		}
		out = append(out, d...)
	}
	if len(errs) > 0 {
		return out, fmt.Errorf("kernels: listing devices: %s", strings.Join(errs, "; "))
	}
	return out, nil
}
