// Package stage runs one pipeline stage of one data-parallel replica: the
// executor of a pipeline.Schedule over the stage's layers. Activations and
// their gradients travel between neighbouring stages as two-member
// collective broadcasts (one group per link and direction), so they inherit
// the collectives' generations, sequence checks and abort on a lost peer;
// gradients are summed within the stage's data-parallel group, and the tied
// token embedding between the first and the last stage. The Worker actor
// (package actors) is its shell, as it is for ddp.Worker.
//
// stage imports pipeline, collective, ddp, nn, nn/optim, data and kernels;
// never actors or above.
package stage
