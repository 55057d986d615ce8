{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, TypeOperators,
             NoStarIsType #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
Keras' @Flatten@: a reshape, no arithmetic and no hardware beyond wires.
Row-major order, as Keras lays out a channels-last tensor.
-}
module K2C.Flatten
  ( flatten
  , flattenS
  ) where

import Clash.Prelude

import K2C.Stream (Stream, mapS)

-- | Rows one after another: element @(r, c)@ goes to index @r * w + c@.
flatten :: Vec h (Vec w a) -> Vec (h * w) a
flatten = concat

-- | 'flatten' as a stream stage (combinational, ready passes through).
flattenS :: Stream dom (Vec h (Vec w a)) (Vec (h * w) a)
flattenS = mapS flatten
