{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, NoStarIsType #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
Weight memories of the dense layers.

A layer's weights live in a file (@weights/<layer>.mem@, one word per line in
ASCII binary, MSB first) rather than in Haskell constants: Clash elaborates
much faster and emits far smaller HDL when the ROM is a @$readmemb@ file.

Word @k@ holds neurons @k*p .. k*p+p-1@, packed exactly as Clash packs a
@Vec p (Vec n w, w)@: processing element 0 in the most significant bits, and
within an element its @n@ weights (input 0 first) followed by its bias.
-}
module K2C.Memory
  ( WeightRom (..)
  , Neuron
  , romWords
  , readWeights
  ) where

import Clash.Prelude

-- | The weights and bias of one neuron with @n@ inputs.
type Neuron n w = (Vec n w, w)

-- | A typed path to a weight file of @g@ words, each holding @p@ neurons of
-- @n@ inputs in format @w@. The types carry the geometry so that a file and
-- the layer using it cannot disagree about sizes.
newtype WeightRom (g :: Nat) (p :: Nat) (n :: Nat) w = WeightRom FilePath

-- | The number of words in the memory (cycles a layer spends walking it).
romWords :: forall g p n w. KnownNat g => WeightRom g p n w -> Int
romWords _ = natToNum @g

-- | Read word @address@. Like every synchronous ROM the answer arrives one
-- cycle after the address; the output in the very first cycle is undefined
-- (the ROM has no reset), so callers only look at words they asked for.
--
-- The file must hold exactly @g@ lines of @p * (n + 1) * BitSize w@ bits.
-- Clash 1.6.4 does not check this: in Haskell simulation a missing line shows
-- up only when read, as @(Array.!): undefined array element@.
readWeights
  :: forall dom g p n w
   . ( HiddenClock dom, HiddenEnable dom
     , KnownNat g, KnownNat p, KnownNat n, BitPack w )
  => WeightRom g p n w
  -> Signal dom (Index g)
  -> Signal dom (Vec p (Neuron n w))
readWeights (WeightRom path) address = unpack <$> romFile (SNat @g) path address
