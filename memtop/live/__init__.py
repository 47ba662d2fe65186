"""Live mode's runtime: the sampler's clock, the pipeline from Frames to the UI's views, replay's seam."""
