"""Pure-TF pieces shared by every algorithm: losses, inner-loop adaptation,
local training and meta-gradients. Nothing here knows about TFF placements."""
