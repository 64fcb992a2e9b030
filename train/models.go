package train

// The models troupe ships register themselves here, so that Run,
// RunAgent and DefaultConfig resolve "gpt", "mlp" and "llama" by name;
// a program registers its own with nn.Register (see examples/custom-model).
import _ "github.com/troupe-ml/troupe/models"
