{-# LANGUAGE DataKinds, NoImplicitPrelude #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
The weight memories, one per Keras layer.

@WeightRom g p n w@: @g@ words of @p@ neurons with @n@ inputs each, in format
@w@. The files are read relative to the working directory of @clash@ and of
the simulation.
-}
module Weights where

import Clash.Prelude

import K2C.Memory (WeightRom (..))

-- | dense_0: 5 neurons, 4 inputs, 2 per word (the last word has 1 padding neuron).
dense_0 :: WeightRom 3 2 4 (SFixed 8 8)
dense_0 = WeightRom "weights/dense_0.mem"

-- | dense_1: 3 neurons, 5 inputs, 3 per word.
dense_1 :: WeightRom 1 3 5 (SFixed 8 8)
dense_1 = WeightRom "weights/dense_1.mem"
