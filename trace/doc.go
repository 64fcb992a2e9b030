// Package trace writes Chrome trace-event files: the JSON that Perfetto
// (ui.perfetto.dev) and chrome://tracing open, with one track per actor.
//
// A Writer collects complete spans ("ph":"X"), instants ("ph":"i"), counters
// ("ph":"C") and the metadata events ("ph":"M") that name processes and
// threads, from any number of goroutines, and writes them all at the end as
// one {"traceEvents":[…]} document. Timestamps and durations are in
// microseconds, as the format requires; spans given as time.Time are taken
// relative to the Writer's origin.
//
// The format is Google's "Trace Event Format" document (the JSON Object
// Format): https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU
//
// trace imports only the standard library, so that every layer of troupe
// (the pure pipeline simulator as well as the actors) can record into it.
package trace
