//go:build cuda

package cuda

import "runtime"

// loop is the goroutine that owns a backend's CUDA context. The driver keeps
// the current context per OS thread, so every driver call must come from the
// one thread the context was made current on: the loop locks its goroutine
// to a thread and runs the closures it is sent, in order. It is the device
// loop of the Worker actor that owns the backend.
type loop struct {
	// ops is buffered so that the caller can queue kernel launches ahead
	// of the driver, as it would queue them on a stream; 256 is far more
	// than the launches between two waits of a training step.
	ops chan op
	// ack signals the end of an op that asked for it. One channel serves
	// every call: Backend methods are never called concurrently.
	ack    chan struct{}
	exited chan struct{}
}

// op is one closure for the loop; ack asks for a signal when it is done,
// stop ends the loop after it.
type op struct {
	f         func()
	ack, stop bool
}

// startLoop starts the loop goroutine and runs setup on it. When setup
// fails the goroutine ends and startLoop returns the error.
func startLoop(setup func() error) (*loop, error) {
	l := &loop{ops: make(chan op, 256), ack: make(chan struct{}), exited: make(chan struct{})}
	errc := make(chan error, 1)
	go l.run(setup, errc)
	if err := <-errc; err != nil {
		<-l.exited
		return nil, err
	}
	return l, nil
}

func (l *loop) run(setup func() error, errc chan<- error) {
	defer close(l.exited)
	// The goroutine returns still locked, so the runtime retires the
	// thread, and whatever CUDA state is left on it, instead of reusing it.
	runtime.LockOSThread()
	if err := setup(); err != nil {
		errc <- err
		return
	}
	errc <- nil
	for o := range l.ops {
		o.f()
		if o.ack {
			l.ack <- struct{}{}
		}
		if o.stop {
			return
		}
	}
}

// call runs f on the loop and waits for it.
func (l *loop) call(f func()) {
	l.ops <- op{f: f, ack: true}
	<-l.ack
}

// post queues f on the loop without waiting.
func (l *loop) post(f func()) { l.ops <- op{f: f} }

// stop runs f as the loop's last op and waits until the goroutine has ended.
func (l *loop) stop(f func()) {
	l.ops <- op{f: f, ack: true, stop: true}
	<-l.ack
	<-l.exited
}
