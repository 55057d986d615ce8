{-# LANGUAGE DataKinds, NoImplicitPrelude #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
The weight memories, one per Keras layer.

@WeightRom d p ch w bias@: @d = G * b@ words, each holding for @p@ processing
elements @ch@ weights in format @w@ and a bias field in format @bias@
(docs/reference/project.md, "Weight memory files"; @G = ceil(F / p)@ groups,
@b@ cycles per group, @ch = ceil(K / b)@). The files are read relative to the
working directory of @clash@ and of the simulation.
-}
module Weights where

import Clash.Prelude

import K2C.Memory (WeightRom (..))

-- | dense_0: 5 neurons of 4 inputs; p = 2, b = 2: G = 3 groups (the last has
-- 1 padding neuron) x 2 chunks of 2 inputs = 6 words.
dense_0 :: WeightRom 6 2 2 (SFixed 8 8) (SFixed 8 8)
dense_0 = WeightRom "weights/dense_0.mem"

-- | dense_1: 3 neurons of 5 inputs; p = 3, b = 2: G = 1 group x 2 chunks of 3
-- inputs (the last chunk has 1 padding input) = 2 words.
dense_1 :: WeightRom 2 3 3 (SFixed 8 8) (SFixed 8 8)
dense_1 = WeightRom "weights/dense_1.mem"
