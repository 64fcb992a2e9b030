package plan

import (
	"errors"
	"math"
	"strings"
	"testing"
)

// approx compares a figure that went through a division (a relative error,
// a bandwidth) with its hand-worked value: these are a few float64 operations
// away from exact, so 1e-12 relative is ample and still catches any real
// mistake in the formula.
func approx(t *testing.T, what string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 1e-12*math.Max(1, math.Abs(want)) {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

func TestCheckDataParallel(t *testing.T) {
	recs, err := readTestdata(t, "dp4.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	res, err := Check(recs, DefaultCheckConfig())
	if err != nil {
		t.Fatal(err)
	}
	// Step 0 is warm-up; medians of steps 1–4: step (128+130)/2 = 129,
	// compute (100+101)/2 = 100.5, comm (59+60)/2 = 59.5.
	if res.Generation != 1 || res.Steps != 4 || res.WarmupSkipped != 1 || res.FirstStep != 1 || res.LastStep != 4 {
		t.Errorf("selection: %+v", res)
	}
	if res.Measured.StepMs != 129 || res.Measured.ComputeMs != 100.5 || res.Measured.CommMs != 59.5 || *res.Measured.BubbleMs != 0 {
		t.Errorf("measured %+v", res.Measured)
	}
	// Predicted: 100.5 + (1 − 0.5)·59.5 = 130.25 (exact in binary).
	if res.Predicted.StepMs != 130.25 || res.PredictedExposedCommMs != 29.75 || res.Overlap != 0.5 || res.CommModelled {
		t.Errorf("predicted %+v exposed %v", res.Predicted, res.PredictedExposedCommMs)
	}
	approx(t, "step error", *res.RelativeError.StepMs, 1.25/129)
	if res.RelativeError.CommMs != nil || res.RelativeError.BubbleMs != nil {
		t.Errorf("errors for inputs: %+v", res.RelativeError)
	}
	// 100 MB in 59.5 ms over 4 ranks: algbw 100e6/0.0595, busbw × 1.5.
	approx(t, "bus bandwidth", res.AchievedBusBandwidth, 100e6/0.0595*1.5)
	if res.DP != 4 || res.World != 4 || res.PP != 1 || res.BubbleFraction != 0 || res.GradBytes != 100e6 {
		t.Errorf("configuration %+v", res)
	}
}

func TestCheckModelledComm(t *testing.T) {
	recs, _ := readTestdata(t, "dp4.jsonl")
	res, err := Check(recs, CheckConfig{Generation: LastGeneration, Bandwidth: 2.5e9})
	if err != nil {
		t.Fatal(err)
	}
	// Ring: 2·3/4·100 MB = 150 MB at 2.5 GB/s = 60 ms; step 100.5 + 30.
	approx(t, "predicted comm", res.Predicted.CommMs, 60)
	approx(t, "predicted step", res.Predicted.StepMs, 130.5)
	approx(t, "comm error", *res.RelativeError.CommMs, 0.5/59.5)
	if !res.CommModelled || res.BandwidthBytesPerS != 2.5e9 {
		t.Errorf("%+v", res)
	}
	// Without grad_bytes there is nothing to model.
	recs, _ = readTestdata(t, "two_steps.jsonl")
	if _, err := Check(recs, CheckConfig{Generation: LastGeneration, Bandwidth: 1e9}); !errors.Is(err, ErrBadMetrics) {
		t.Errorf("bandwidth without grad_bytes: %v", err)
	}
}

func TestCheckPipeline(t *testing.T) {
	recs, _ := readTestdata(t, "pp3.jsonl")
	res, err := Check(recs, DefaultCheckConfig())
	if err != nil {
		t.Fatal(err)
	}
	// Steps 2–3: step 400, compute 300, bubble 100. Bubble 2/8 of the step:
	// 300 / (1 − 0.25) = 400, bubble 0.25·400 = 100. All exact.
	if res.BubbleFraction != 0.25 || res.Predicted.StepMs != 400 || *res.Predicted.BubbleMs != 100 ||
		*res.Measured.BubbleMs != 100 || *res.RelativeError.StepMs != 0 || *res.RelativeError.BubbleMs != 0 {
		t.Errorf("pipeline: %+v predicted bubble %v", res, *res.Predicted.BubbleMs)
	}
	if res.DP != 1 || res.PP != 3 || res.MicroBatches != 6 || res.AchievedBusBandwidth != 0 {
		t.Errorf("configuration %+v", res)
	}
	// A pipeline without its micro-batch count cannot be predicted.
	recs[2].MicroBatches = 0
	if _, err := Check(recs, DefaultCheckConfig()); !errors.Is(err, ErrBadMetrics) {
		t.Errorf("pp without micro_batches: %v", err)
	}
}

func TestCheckGenerations(t *testing.T) {
	recs, _ := readTestdata(t, "elastic.jsonl")
	res, err := Check(recs, DefaultCheckConfig())
	if err != nil {
		t.Fatal(err)
	}
	// Generation 2, steps 5–6: step 113, compute 98, comm 11 → 109.
	if res.Generation != 2 || res.Steps != 2 || res.FirstStep != 5 || res.World != 2 || res.DP != 2 ||
		res.Measured.StepMs != 113 || res.Predicted.StepMs != 109 {
		t.Errorf("last generation: %+v", res)
	}
	approx(t, "step error", *res.RelativeError.StepMs, -4.0/113)
	res, err = Check(recs, CheckConfig{Generation: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Generation 1, steps 1–3: step 72, compute 51, comm 21 → 72.
	if res.Steps != 3 || res.Measured.StepMs != 72 || res.Predicted.StepMs != 72 || *res.RelativeError.StepMs != 0 {
		t.Errorf("generation 1: %+v", res)
	}
	if _, err := Check(recs, CheckConfig{Generation: 7}); !errors.Is(err, ErrNoSteps) {
		t.Errorf("absent generation: %v", err)
	} else if want := "it has [1 2]"; !strings.Contains(err.Error(), want) {
		t.Errorf("absent generation: %q lacks %q", err, want)
	}
	if _, err := Check(recs, CheckConfig{Generation: -5}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("negative generation: %v", err)
	}
}

func TestCheckTwoStepsKeepsBoth(t *testing.T) {
	recs, _ := readTestdata(t, "two_steps.jsonl")
	res, err := Check(recs, DefaultCheckConfig())
	if err != nil {
		t.Fatal(err)
	}
	// Only two steps: none skipped. Step 110, compute 85, comm 15 → 100.
	if res.WarmupSkipped != 0 || res.Steps != 2 || res.Measured.StepMs != 110 || res.Predicted.StepMs != 100 || res.Measured.BubbleMs != nil {
		t.Errorf("%+v", res)
	}
	if _, err := Check(nil, DefaultCheckConfig()); !errors.Is(err, ErrNoSteps) {
		t.Errorf("no records: %v", err)
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		v    []float64
		want float64
	}{{[]float64{3}, 3}, {[]float64{3, 1}, 2}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(c.v); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.v, got, c.want)
		}
	}
}
