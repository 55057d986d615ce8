{-# LANGUAGE DataKinds, NoImplicitPrelude, FlexibleContexts #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
The network: one function per Keras layer, composed left to right with '|>'.
Each layer takes its parallelism (neurons per cycle) as an 'SNat'.
-}
module Network where

import Clash.Prelude

import K2C.Activation
import K2C.Dense (dense)
import K2C.Stream (Stream, (|>))
import qualified Weights as W

-- | Activations between layers, format 1,7,8 (sign, integer, fraction bits).
type Act = SFixed 8 8

-- | dense_0 accumulator, exact: 1,19,16 (ci = 8 + 8 + ceil(log2(4 + 1)) + 1).
type Acc0 = SFixed 20 16

-- | dense_1 accumulator, exact: 1,19,16 (ci = 8 + 8 + ceil(log2(5 + 1)) + 1).
type Acc1 = SFixed 20 16

-- | The flattened network input.
type Input = Vec 4 Act

-- | The network output (the scores of the last layer).
type Output = Vec 3 Act

-- | Keras layer dense_0: 4 -> 5, relu.
dense_0 :: HiddenClockResetEnable dom => SNat 2 -> Stream dom (Vec 4 Act) (Vec 5 Act)
dense_0 p = dense p W.dense_0 (relu . requantize :: Acc0 -> Act)

-- | Keras layer dense_1: 5 -> 3, sigmoid.
dense_1 :: HiddenClockResetEnable dom => SNat 3 -> Stream dom (Vec 5 Act) (Vec 3 Act)
dense_1 p = dense p W.dense_1 (sigmoidPlan . requantize :: Acc1 -> Act)

-- | The whole network.
network
  :: HiddenClockResetEnable dom
  => SNat 2 -> SNat 3 -> Stream dom Input Output
network p0 p1 = dense_0 p0 |> dense_1 p1
