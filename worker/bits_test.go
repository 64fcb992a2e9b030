package worker

import "math"

func bits(f float32) uint32            { return math.Float32bits(f) }
func float32frombits(u uint32) float32 { return math.Float32frombits(u) }
