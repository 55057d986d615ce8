{-# LANGUAGE DataKinds, NoImplicitPrelude, FlexibleContexts, TypeApplications #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
The network: one function per Keras layer, composed left to right with '|>'.
Each compute layer takes its space-time knobs as 'SNat's: @p@, the
processing elements (neurons computed in parallel), @b@, the cycles each
one spends on one input vector, and @l@, the adder levels per pipeline stage
(0: the whole dot product in one cycle).
-}
module Network where

import Clash.Prelude

import K2C.Activation
import K2C.Dense (dense)
import K2C.Relu (hardSigmoid)
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
dense_0
  :: HiddenClockResetEnable dom
  => SNat 2 -> SNat 2 -> SNat 1 -> Stream dom (Vec 4 Act) (Vec 5 Act)
dense_0 pe cycles levels = dense pe cycles levels W.dense_0 finish
  where
    finish :: Finish 0 Acc0 Act
    finish = Finish requantize relu

-- | Keras layer dense_1: 5 -> 3, hard_sigmoid (work width 40: bits + 2 frac + 8).
dense_1
  :: HiddenClockResetEnable dom
  => SNat 3 -> SNat 2 -> SNat 0 -> Stream dom (Vec 5 Act) (Vec 3 Act)
dense_1 pe cycles levels = dense pe cycles levels W.dense_1 finish
  where
    finish :: Finish 0 Acc1 Act
    finish = Finish requantize (hardSigmoid @40)

-- | The whole network.
network
  :: HiddenClockResetEnable dom
  => SNat 2  -- ^ processing elements of dense_0
  -> SNat 2  -- ^ cycles per group of dense_0
  -> SNat 1  -- ^ adder levels per pipeline stage of dense_0
  -> SNat 3  -- ^ processing elements of dense_1
  -> SNat 2  -- ^ cycles per group of dense_1
  -> SNat 0  -- ^ adder levels per pipeline stage of dense_1 (not pipelined)
  -> Stream dom Input Output
network pe0 cycles0 levels0 pe1 cycles1 levels1 =
  dense_0 pe0 cycles0 levels0 |> dense_1 pe1 cycles1 levels1
