package train

// The models troupe ships (package models) register themselves here, so
// that Run, RunAgent and DefaultConfig resolve them by name;
// a program registers its own with nn.Register (see examples/custom-model).
import _ "github.com/troupe-ml/troupe/models"
