// Package checkpoint saves and loads training checkpoints: a directory per
// checkpoint, written atomically, in the background, by every rank in
// parallel, and loadable into a world of another size or another pipeline
// split. docs/CHECKPOINTS.md is the user's guide; this comment is the map.
//
// # Format
//
//	ckpt/
//	  latest                           "step-000300\n": the commit point
//	  step-000200/
//	  step-000300/
//	    manifest.json                  Manifest: step, generation, world,
//	                                   sampler, RNG, optimizer, schedule,
//	                                   config, files, tensors and slices
//	    shard-00000-of-00002.safetensors   rank 0's slices
//	    shard-00001-of-00002.safetensors   rank 1's slices
//
// Shard files are plain safetensors files (safetensors.load_file and
// torch read them as they are): each holds a block of whole rows of some
// logical tensors, stored under the tensor's name with the block's shape.
// Parameters keep their PyTorch state_dict names; optimizer state buffers
// are "optim.<state>.<param>" (optim.exp_avg.blocks.0.qkv.weight). The
// manifest records, per tensor, its dtype, logical shape, stage and slices
// (torch.distributed.checkpoint-style offsets and sizes, the file, the
// byte offset and the CRC-32C), per file its rank, size and header CRC, and
// a checksum of itself.
//
// # Writing
//
// A Snapshot is the state at a step boundary in host memory (AddModel
// downloads a ParamSet and its optimizer into buffers the snapshot keeps).
// Partition, a pure function, splits each stage's tensors among its
// data-parallel ranks by bytes, cutting at row boundaries, so each rank
// writes about 1/dp of its stage. WriteShard writes and fsyncs one rank's
// file into a temporary directory; BuildManifest merges the ranks' Parts;
// Commit writes the manifest, fsyncs, renames the directory into place and
// moves the latest pointer by write-fsync-rename. planCommit, the pure core
// of Commit, lists those steps; a crash at any of them leaves `latest`
// naming a complete checkpoint. Save does all of it in one process;
// AsyncSaver runs Save on one goroutine while training goes on, never two
// at once. Across processes, ranks call WriteShard (and WritePart) into the
// temporary directory BeginSave made, and the leader calls ReadParts,
// BuildManifest and Commit.
//
// # Reading
//
// OpenLatest/Open check the manifest and every shard file's size and
// header; reads verify the CRC-32C of every slice they touch, and Verify
// checks all. Manifest.PlanRead and PlanRank are pure functions from a
// checkpoint's layout and a target element range or (dp, pp, stage split,
// rank) to the list of reads; Checkpoint.Restore loads a ParamSet and its
// optimizer by parameter name, whatever world wrote the checkpoint.
//
// # File systems
//
// Every write goes through FS. OSFS is the real one; MemFS models
// durability (unsynced data and directory entries are lost on Crash, or
// partly kept on CrashTorn); FaultFS fails or crashes at the N-th operation
// of a kind. The crash tests of this package run a save to count its
// operations, then crash it at each one and check that the latest
// checkpoint still loads.
//
// checkpoint imports kernels, nn, nn/optim, data and safetensors, never
// actors, elastic or train: the actors that decide when to checkpoint are
// the shell around it.
package checkpoint
